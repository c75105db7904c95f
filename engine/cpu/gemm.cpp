// The public GEMM entry points: edge cases, the choice of microkernel, and threading. The blocked
// loop nest itself is in gemm_packed.cpp, the kernels in gemm_kernel_*.cpp.
#include "engine/cpu/gemm.h"

#include <algorithm>

#include "engine/cpu/gemm_kernel.h"
#include "engine/cpu/gemm_packed.h"
#include "engine/cpu/gemm_small_m.h"
#include "engine/cpu/gemm_threading.h"
#include "engine/parallel.h"

namespace qkv::cpu {
namespace {

template <typename T>
void scale_c(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

}  // namespace

int gemm_threads(int64_t m, int64_t n, int64_t k, int64_t min_parallel_macs) {
  if (in_parallel_region() || m * n * k < min_parallel_macs) return 1;
  return num_threads();
}

void split_into_bands(int64_t m, int64_t n, int64_t k, int mr, int nr,
                      const std::function<void(int64_t, int64_t, int64_t, int64_t)>& band,
                      int64_t min_parallel_macs) {
  if (gemm_threads(m, n, k, min_parallel_macs) == 1) return band(0, m, 0, n);
  if (m >= n) {
    parallel_for(0, (m + mr - 1) / mr, 1,
                 [&](int64_t t0, int64_t t1) { band(t0 * mr, std::min(m, t1 * mr), 0, n); });
  } else {
    parallel_for(0, (n + nr - 1) / nr, 1,
                 [&](int64_t t0, int64_t t1) { band(0, m, t0 * nr, std::min(n, t1 * nr)); });
  }
}

void for_each_product(int64_t batch, int64_t m, int64_t n, int64_t k,
                      const std::function<void(int64_t, int64_t)>& products,
                      int64_t min_parallel_macs) {
  const int threads = in_parallel_region() ? 1 : num_threads();
  const bool split_batch =
      threads > 1 && batch >= threads &&
      (batch % threads == 0 || batch >= 4 * threads || m * n * k < min_parallel_macs);
  if (split_batch)
    parallel_for(0, batch, 1, products);
  else
    products(0, batch);
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc,
          GemmEpilogue<T> epilogue) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == T(0)) {
    scale_c(m, n, beta, c, ldc);
    finish_tile(epilogue, 0, true, true, m, n, c, ldc);
    return;
  }
  if (m <= kSmallM) {
    // A few rows: read B once in place instead of packing it (gemm_small_m.h). Threads split the
    // columns in blocks of 64, the width of one register block of the kernel.
    return split_into_bands(m, n, k, 64, 64, [&](int64_t, int64_t, int64_t j0, int64_t j1) {
      gemm_small_m(trans_a, trans_b, m, j0, j1, k, alpha, a, lda, b, ldb, beta, c, ldc);
      finish_tile(epilogue, j0, true, true, m, j1 - j0, c + j0, ldc);
    });
  }
  const GemmMicrokernel<T>& kernel = *gemm_kernels<T>().front();
  // Operand strides along a row of op(A) and a column of op(B), to find a band's corner.
  const int64_t a_row = trans_a ? 1 : lda, b_col = trans_b ? ldb : 1;
  split_into_bands(
      m, n, k, kernel.mr, kernel.nr, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
        gemm_packed(kernel, trans_a, trans_b, i1 - i0, j1 - j0, k, alpha, a + i0 * a_row, lda,
                    b + j0 * b_col, ldb, beta, c + i0 * ldc + j0, ldc,
                    {epilogue.bias ? epilogue.bias + j0 : nullptr, epilogue.relu});
      });
}

template <typename T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  T alpha, const T* a, int64_t lda, BatchStrides stride_a, const T* b, int64_t ldb,
                  BatchStrides stride_b, T beta, T* c, int64_t ldc, BatchStrides stride_c) {
  for_each_product(batch, m, n, k, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      gemm(trans_a, trans_b, m, n, k, alpha, a + stride_a.offset(i), lda, b + stride_b.offset(i),
           ldb, beta, c + stride_c.offset(i), ldc);
  });
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t, GemmEpilogue<float>);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t, GemmEpilogue<double>);
template void gemm_batched<float>(int64_t, bool, bool, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, BatchStrides, const float*, int64_t,
                                  BatchStrides, float, float*, int64_t, BatchStrides);
template void gemm_batched<double>(int64_t, bool, bool, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, BatchStrides, const double*, int64_t,
                                   BatchStrides, double, double*, int64_t, BatchStrides);

}  // namespace qkv::cpu
