// GEMM with very few rows in op(A) (matrix-vector products): one decoding step of a transformer
// multiplies a [batch, d] activation by every weight, with batch often 1.
//
// The packed GEMM (gemm_packed.h) copies all of op(B) into panels before it computes: that pays
// when each element of B is then reused across many rows of A, but with m <= kSmallM rows the copy
// costs more than the product itself (a 512 x 2048 weight is 4 MB to read, write and read again).
// These loops read B exactly once, straight from where it lies.
#pragma once

#include <cstdint>

namespace qkv::cpu {

// At or below this many rows gemm() takes the direct path (measured: see docs/CPU_KERNELS.md).
constexpr int64_t kSmallM = 4;

// C = alpha * op(A) @ op(B) + beta * C for m <= kSmallM, same conventions as gemm() in gemm.h;
// columns [j0, j1) only, so callers can split the columns between threads. Requires k > 0.
template <typename T>
void gemm_small_m(bool trans_a, bool trans_b, int64_t m, int64_t j0, int64_t j1, int64_t k, T alpha,
                  const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace qkv::cpu
