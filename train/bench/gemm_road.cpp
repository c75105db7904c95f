#include "train/bench/gemm_road.h"

#include <algorithm>

namespace qkv::bench {

void gemm_naive(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += a[i * k + p] * b[p * n + j];
      c[i * n + j] = sum;
    }
}

void gemm_reordered(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  std::fill(c, c + m * n, 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const float av = a[i * k + p];
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += av * b[p * n + j];
    }
}

void gemm_blocked(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  // A 256 x 256 block of B is 256 KB: it fits in L2 and is reused by every row of C; a 256-wide
  // strip of a C row (1 KB) stays in L1 across the 256 steps of p.
  constexpr int64_t kBlock = 256, nBlock = 256;
  std::fill(c, c + m * n, 0.0f);
  for (int64_t p0 = 0; p0 < k; p0 += kBlock)
    for (int64_t j0 = 0; j0 < n; j0 += nBlock) {
      const int64_t p1 = std::min(k, p0 + kBlock), j1 = std::min(n, j0 + nBlock);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = p0; p < p1; ++p) {
          const float av = a[i * k + p];
          for (int64_t j = j0; j < j1; ++j) c[i * n + j] += av * b[p * n + j];
        }
    }
}

}  // namespace qkv::bench
