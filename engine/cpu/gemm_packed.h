// The serial, cache-blocked, packed GEMM loop nest (the Goto / BLIS algorithm) for one kernel.
//
// gemm() in gemm.cpp decides threading and calls this on each thread's share of C; tests and the
// benchmark call it directly to pin a particular microkernel.
#pragma once

#include <cstdint>

#include "engine/cpu/gemm_kernel.h"

namespace qkv::cpu {

// C[i, j] += bias[j] for i < m, j < n.
template <typename T>
void add_row_bias(int64_t m, int64_t n, const T* bias, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += bias[j];
}

// C = alpha * op(A) @ op(B) + beta * C (+ bias[j] on every row, when bias is given) on the calling
// thread, with the same conventions as gemm() in gemm.h. Requires m, n, k > 0.
template <typename T>
void gemm_packed(const GemmMicrokernel<T>& kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                 int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                 int64_t ldc, const T* bias = nullptr);

}  // namespace qkv::cpu
