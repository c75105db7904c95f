// The public GEMM entry points: edge cases, the choice of microkernel, and threading. The blocked
// loop nest itself is in gemm_packed.cpp, the kernels in gemm_kernel_*.cpp.
#include "engine/cpu/gemm.h"

#include <algorithm>

#include "engine/cpu/gemm_kernel.h"
#include "engine/cpu/gemm_packed.h"
#include "engine/cpu/gemm_small_m.h"
#include "engine/parallel.h"

namespace qkv::cpu {
namespace {

// Below about this many multiply-adds (~80^3), handing work to the pool costs more than a second
// core saves. The pool's workers spin briefly before sleeping, so a parallel_for costs ~1 us when
// kernels come back to back; with sleeping workers (30-70 us per wake-up on the 2-core VM this
// was tuned on) the threshold would have to be about 1 << 23.
constexpr int64_t kMinParallelMacs = int64_t(1) << 19;

template <typename T>
void scale_c(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == T(0)) return scale_c(m, n, beta, c, ldc);
  const int threads = in_parallel_region() ? 1 : num_threads();
  if (m <= kSmallM) {
    // A few rows: read B once in place instead of packing it (gemm_small_m.h). Threads split the
    // columns in blocks of 64, the width of one register block of the kernel.
    if (threads == 1 || m * n * k < kMinParallelMacs)
      return gemm_small_m(trans_a, trans_b, m, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return parallel_for(0, (n + 63) / 64, 1, [&](int64_t t0, int64_t t1) {
      gemm_small_m(trans_a, trans_b, m, t0 * 64, std::min(n, t1 * 64), k, alpha, a, lda, b, ldb,
                   beta, c, ldc);
    });
  }
  const GemmMicrokernel<T>& kernel = *gemm_kernels<T>().front();
  if (threads == 1 || m * n * k < kMinParallelMacs)
    return gemm_packed(kernel, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);

  // Each thread computes a band of C with its own packing. Splitting rows makes every thread pack
  // all of B (extra work ~ k*n per thread), splitting columns makes each pack all of A (~ m*k), so
  // the band runs across the larger dimension. Bands are whole register tiles.
  const int64_t a_row = trans_a ? 1 : lda, b_col = trans_b ? ldb : 1;
  if (m >= n) {
    parallel_for(0, (m + kernel.mr - 1) / kernel.mr, 1, [&](int64_t t0, int64_t t1) {
      const int64_t i0 = t0 * kernel.mr, i1 = std::min(m, t1 * kernel.mr);
      gemm_packed(kernel, trans_a, trans_b, i1 - i0, n, k, alpha, a + i0 * a_row, lda, b, ldb, beta,
                  c + i0 * ldc, ldc);
    });
  } else {
    parallel_for(0, (n + kernel.nr - 1) / kernel.nr, 1, [&](int64_t t0, int64_t t1) {
      const int64_t j0 = t0 * kernel.nr, j1 = std::min(n, t1 * kernel.nr);
      gemm_packed(kernel, trans_a, trans_b, m, j1 - j0, k, alpha, a, lda, b + j0 * b_col, ldb, beta,
                  c + j0, ldc);
    });
  }
}

template <typename T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  T alpha, const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                  int64_t stride_b, T beta, T* c, int64_t ldc, int64_t stride_c) {
  auto one = [&](int64_t i) {
    gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
         c + i * stride_c, ldc);
  };
  // Many small products (attention's [batch*heads, T, d] matmuls) are best spread over the batch:
  // each thread runs whole products serially, with no synchronization inside them. A few large
  // products are better threaded inside, where the split is even whatever the batch size.
  const int threads = in_parallel_region() ? 1 : num_threads();
  const bool split_batch =
      threads > 1 && batch >= threads &&
      (batch % threads == 0 || batch >= 4 * threads || m * n * k < kMinParallelMacs);
  if (split_batch) {
    parallel_for(0, batch, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void gemm_batched<float>(int64_t, bool, bool, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                                  float, float*, int64_t, int64_t);
template void gemm_batched<double>(int64_t, bool, bool, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, int64_t, const double*, int64_t, int64_t,
                                   double, double*, int64_t, int64_t);

}  // namespace qkv::cpu
