// The serial, cache-blocked, packed GEMM loop nest (the Goto / BLIS algorithm) for one kernel.
//
// gemm() in gemm.cpp decides threading and calls this on each thread's share of C; tests and the
// benchmark call it directly to pin a particular microkernel.
#pragma once

#include <cstdint>

#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_kernel.h"

namespace qkv::cpu {

// Applies the epilogue (gemm.h) to C[i, j] for i < m, j < n, bias + j0 being column j's: the bias
// when `first` (the tile's first depth block), the ReLU when `last`.
template <typename T>
void finish_tile(const GemmEpilogue<T>& e, int64_t j0, bool first, bool last, int64_t m, int64_t n,
                 T* c, int64_t ldc) {
  if (e.bias && first)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += e.bias[j0 + j];
  if (e.relu && last)  // NaN stays NaN, as relu() leaves it
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = c[i * ldc + j] < T(0) ? T(0) : c[i * ldc + j];
}

// C = alpha * op(A) @ op(B) + beta * C and its epilogue on the calling thread, with the same
// conventions as gemm() in gemm.h (epilogue.bias: the value of C's first column first).
// Requires m, n, k > 0.
template <typename T>
void gemm_packed(const GemmMicrokernel<T>& kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                 int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                 int64_t ldc, GemmEpilogue<T> epilogue = {});

}  // namespace qkv::cpu
