// The public GEMM entry points: edge cases, the choice of microkernel, and threading. The blocked
// loop nest itself is in gemm_packed.cpp, the kernels in gemm_kernel_*.cpp.
#include "engine/cpu/gemm.h"

#include <algorithm>

#include "engine/cpu/gemm_kernel.h"
#include "engine/cpu/gemm_packed.h"
#include "engine/cpu/gemm_small_m.h"
#include "engine/cpu/gemm_threading.h"
#include "engine/cpu/scratch_buffer.h"
#include "engine/parallel.h"

namespace qkv::cpu {
namespace {

template <typename T>
void scale_c(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

// A product whose depth dwarfs its result, such as a weight's gradient ([out, rows] x [rows, in]
// with thousands of rows), is summed as two halves of the depth: C = beta C + alpha (A0 B0) on one
// thread, P = alpha (A1 B1) on the other, then C += P. Each thread reads only its half of the rows,
// which the row-split kernels before it left in its own cache; splitting C instead has every
// thread pack every row, half of them from the other core's cache (docs/CPU_KERNELS.md, "Two
// cores, two caches"). The halves are summed the same way at any thread count (in turn on one
// thread, each banded over the threads on more than two), so the result has the same bits.
bool sums_depth_in_halves(int64_t m, int64_t n, int64_t k) {
  return k >= kDepthSplitRatio * std::max(m, n) && m * n * k >= kMinParallelMacs;
}

template <typename T>
void gemm_depth_halves(const GemmMicrokernel<T>& kernel, bool trans_a, bool trans_b, int64_t m,
                       int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
                       int64_t ldb, T beta, T* c, int64_t ldc) {
  thread_local ScratchBuffer scratch;
  T* partial = static_cast<T*>(scratch.get(size_t(m * n) * sizeof(T)));
  const int64_t half = (k + 1) / 2;
  const int64_t a_depth = trans_a ? lda : 1, b_depth = trans_b ? 1 : ldb;  // one step of depth
  const int64_t a_row = trans_a ? 1 : lda, b_col = trans_b ? ldb : 1;      // a band's corner
  // Half h of the depth, rows [i0, i1) and columns [j0, j1) of its result.
  auto run_half = [&](int h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const int64_t k0 = h * half, depth = h == 0 ? half : k - half;
    const T* ah = a + k0 * a_depth + i0 * a_row;
    const T* bh = b + k0 * b_depth + j0 * b_col;
    if (h == 0)
      gemm_packed(kernel, trans_a, trans_b, i1 - i0, j1 - j0, depth, alpha, ah, lda, bh, ldb, beta,
                  c + i0 * ldc + j0, ldc);
    else
      gemm_packed(kernel, trans_a, trans_b, i1 - i0, j1 - j0, depth, alpha, ah, lda, bh, ldb, T(0),
                  partial + i0 * n + j0, n);
  };
  if (gemm_threads(m, n, k) == 2) {
    parallel_for(0, 2, 1, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) run_half(int(h), 0, m, 0, n);
    });
  } else {
    for (int h = 0; h < 2; ++h)
      split_into_bands(
          m, n, half, kernel.mr, kernel.nr,
          [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) { run_half(h, i0, i1, j0, j1); });
  }
  parallel_for(0, m, std::max<int64_t>(1, 4096 / n), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T* to = c + i * ldc;
      const T* from = partial + i * n;
      for (int64_t j = 0; j < n; ++j) to[j] += from[j];
    }
  });
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
  if (!epilogue.bias && !epilogue.relu && sums_depth_in_halves(m, n, k))
    return gemm_depth_halves(kernel, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                             ldc);
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
