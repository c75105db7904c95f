// A plain tiled GEMM: correct for every shape and layout; the packed fast path replaces its body.
#include "engine/cpu/gemm.h"

#include <algorithm>

#include "engine/parallel.h"

namespace qkv::cpu {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  auto A = [&](int64_t i, int64_t p) { return trans_a ? a[p * lda + i] : a[i * lda + p]; };
  auto B = [&](int64_t p, int64_t j) { return trans_b ? b[j * ldb + p] : b[p * ldb + j]; };
  parallel_for(0, m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n * k)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T* crow = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) crow[j] = beta == T(0) ? T(0) : beta * crow[j];
      for (int64_t p = 0; p < k; ++p) {
        T av = alpha * A(i, p);
        if (!trans_b) {
          const T* brow = b + p * ldb;
          for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
        } else {
          for (int64_t j = 0; j < n; ++j) crow[j] += av * B(p, j);
        }
      }
    }
  });
}

template <typename T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  T alpha, const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                  int64_t stride_b, T beta, T* c, int64_t ldc, int64_t stride_c) {
  for (int64_t i = 0; i < batch; ++i)
    gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
         c + i * stride_c, ldc);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void gemm_batched<float>(int64_t, bool, bool, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                                  float, float*, int64_t, int64_t);
template void gemm_batched<double>(int64_t, bool, bool, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, int64_t, const double*, int64_t,
                                   int64_t, double, double*, int64_t, int64_t);

}  // namespace qkv::cpu
