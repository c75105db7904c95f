// The serial, cache-blocked, packed GEMM loop nest (the Goto / BLIS algorithm) for one kernel.
//
// gemm() in gemm.cpp decides threading and calls this on each thread's share of C; tests and the
// benchmark call it directly to pin a particular microkernel.
#pragma once

#include <cstdint>

#include "engine/cpu/gemm_kernel.h"

namespace qkv::cpu {

// C = alpha * op(A) @ op(B) + beta * C on the calling thread, with the same conventions as gemm()
// in gemm.h. Requires m, n, k > 0.
template <typename T>
void gemm_packed(const GemmMicrokernel<T>& kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                 int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                 int64_t ldc);

}  // namespace qkv::cpu
