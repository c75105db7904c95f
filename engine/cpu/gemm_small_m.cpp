// Matrix-vector style GEMM for m <= kSmallM rows; see gemm_small_m.h for why it exists.
//
// Both loops keep their partial sums in fixed-size local arrays whose sizes are compile-time
// constants (M rows x one 64-byte vector per lane group), so the compiler holds them in registers
// and vectorizes the inner `omp simd` loops; B is streamed once, in the order it lies in memory.
#include "engine/cpu/gemm_small_m.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "engine/error.h"

namespace qkv::cpu {
namespace {

// Elements of T in one 512-bit vector: the lane width the inner loops are written for.
template <typename T>
constexpr int kLanes = int(64 / sizeof(T));

// Stores alpha * sum + beta * c, reading c only when beta is non-zero (c may be uninitialized).
template <typename T>
inline void store(T* c, T sum, T alpha, T beta) {
  *c = beta == T(0) ? alpha * sum : alpha * sum + beta * *c;
}

// op(B) = B^T with B stored [n, k]: every C[i][j] is a dot product of two contiguous rows. Four
// columns at a time give four independent accumulator chains per row, which hides FMA latency,
// and each row of B is loaded once for all M rows of A.
template <typename T, int M>
void dot_rows(int64_t j0, int64_t j1, int64_t k, T alpha, const T* a_rows, const T* b, int64_t ldb,
              T beta, T* c, int64_t ldc) {
  constexpr int W = kLanes<T>, J = 4;
  for (int64_t j = j0; j < j1; j += J) {
    const T* brow[J];
    // Past the last column, repeat it: the extra sums are computed and thrown away, which keeps
    // the inner loop free of branches.
    for (int jj = 0; jj < J; ++jj) brow[jj] = b + std::min(j + jj, j1 - 1) * ldb;
    T acc[M][J][W] = {};
    int64_t kk = 0;
    for (; kk + W <= k; kk += W)
      for (int i = 0; i < M; ++i)
        for (int jj = 0; jj < J; ++jj) {
          const T* ai = a_rows + i * k + kk;
          const T* bj = brow[jj] + kk;
          _Pragma("omp simd") for (int w = 0; w < W; ++w) acc[i][jj][w] += ai[w] * bj[w];
        }
    for (int i = 0; i < M; ++i)
      for (int jj = 0; jj < J && j + jj < j1; ++jj) {
        // A reduction the compiler vectorizes (a tree of shuffles and adds), not a W-long chain.
        T sum = 0;
        _Pragma("omp simd reduction(+ : sum)") for (int w = 0; w < W; ++w) sum += acc[i][jj][w];
        for (int64_t t = kk; t < k; ++t) sum += a_rows[i * k + t] * brow[jj][t];
        store(c + i * ldc + j + jj, sum, alpha, beta);
      }
  }
}

// op(B) = B with B stored [k, n]: C's row i is a sum over k of A[i][k] times B's row k. A block
// of kBlock columns of C stays in registers while the k rows of B stream past.
template <typename T, int M>
void axpy_rows(int64_t j0, int64_t j1, int64_t k, T alpha, const T* a_rows, const T* b, int64_t ldb,
               T beta, T* c, int64_t ldc) {
  constexpr int kBlock = 4 * kLanes<T>;
  int64_t j = j0;
  for (; j + kBlock <= j1; j += kBlock) {
    T acc[M][kBlock] = {};
    for (int64_t kk = 0; kk < k; ++kk) {
      const T* bk = b + kk * ldb + j;
      for (int i = 0; i < M; ++i) {
        const T aik = a_rows[i * k + kk];
        _Pragma("omp simd") for (int w = 0; w < kBlock; ++w) acc[i][w] += aik * bk[w];
      }
    }
    for (int i = 0; i < M; ++i)
      for (int w = 0; w < kBlock; ++w) store(c + i * ldc + j + w, acc[i][w], alpha, beta);
  }
  if (j == j1) return;
  // The last, narrower block: the same loop with a run-time width.
  const int64_t width = j1 - j;
  T acc[M][kBlock] = {};
  for (int64_t kk = 0; kk < k; ++kk) {
    const T* bk = b + kk * ldb + j;
    for (int i = 0; i < M; ++i) {
      const T aik = a_rows[i * k + kk];
      _Pragma("omp simd") for (int64_t w = 0; w < width; ++w) acc[i][w] += aik * bk[w];
    }
  }
  for (int i = 0; i < M; ++i)
    for (int64_t w = 0; w < width; ++w) store(c + i * ldc + j + w, acc[i][w], alpha, beta);
}

#ifdef __AVX512F__
// The float dot-product form in AVX-512 intrinsics: the hot loop of a decoding step, where it
// streams weights faster than the compiled template above (docs/CPU_KERNELS.md, "Few rows"). J
// columns at a time give J independent FMA chains per row of A - eight for one or two rows (enough
// to cover FMA latency with two FMA units), four for three or four rows so that the M x J
// accumulators still fit in the 32 vector registers. The J vector sums are then reduced together by
// one transpose-and-add tree instead of J separate horizontal sums.

// GCC 12's AVX-512 headers implement unpack and shuffle on a self-initialized "undefined" vector,
// which -Wmaybe-uninitialized reports wherever they are inlined (GCC bug 105593); nothing here
// reads an uninitialized value.
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC-only warning; clang would warn about the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Per 128-bit lane: x0+x1, y0+y1, x2+x3, y2+y3.
inline __m512 add_pairs(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
}
// Of two add_pairs results: per 128-bit lane, one partial sum of each of the four vectors.
inline __m512 add_quads(__m512 x, __m512 y) {
  const __m512d xd = _mm512_castps_pd(x), yd = _mm512_castps_pd(y);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(xd, yd)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(xd, yd)));
}

// Four vectors of partial sums -> one 128-bit vector holding the four totals, in order.
inline __m128 sum_each(const __m512 (&v)[4]) {
  const __m512 s = add_quads(add_pairs(v[0], v[1]), add_pairs(v[2], v[3]));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Eight vectors of partial sums -> one 256-bit vector holding the eight totals, in order.
inline __m256 sum_each(const __m512 (&v)[8]) {
  const __m512 lo = add_quads(add_pairs(v[0], v[1]), add_pairs(v[2], v[3]));  // sums 0-3 per lane
  const __m512 hi = add_quads(add_pairs(v[4], v[5]), add_pairs(v[6], v[7]));  // sums 4-7 per lane
  // Add lanes 0+1 and 2+3 of each, then the two halves: [0-3 | 4-7].
  const __m512 even = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 odd = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
  const __m512 w = _mm512_add_ps(even, odd);  // [0-3 a, 0-3 b, 4-7 a, 4-7 b]
  const __m512 x = _mm512_shuffle_f32x4(w, w, _MM_SHUFFLE(3, 1, 2, 0));
  return _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
}

// c[0, J) = alpha * sums + beta * c for the `columns` that exist; c is read only when beta says so
// (it may be uninitialized).
inline void store_sums(__m128 sums, float* c, __mmask8 columns, float alpha, float beta) {
  sums = _mm_mul_ps(_mm_set1_ps(alpha), sums);
  if (beta != 0.0f) sums = _mm_fmadd_ps(_mm_set1_ps(beta), _mm_maskz_loadu_ps(columns, c), sums);
  _mm_mask_storeu_ps(c, columns, sums);
}
inline void store_sums(__m256 sums, float* c, __mmask8 columns, float alpha, float beta) {
  sums = _mm256_mul_ps(_mm256_set1_ps(alpha), sums);
  if (beta != 0.0f)
    sums = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_maskz_loadu_ps(columns, c), sums);
  _mm256_mask_storeu_ps(c, columns, sums);
}

template <int M>
void dot_rows_avx512(int64_t j0, int64_t j1, int64_t k, float alpha, const float* a_rows,
                     const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  constexpr int J = M <= 2 ? 8 : 4;
  const __mmask16 tail = __mmask16((1u << (k % 16)) - 1);  // the last k % 16 elements
  const int64_t k_full = k - k % 16;
  for (int64_t j = j0; j < j1; j += J) {
    const float* brow[J];
    // Past the last column, repeat it (as in dot_rows): the extra sums are simply not stored.
    for (int jj = 0; jj < J; ++jj) brow[jj] = b + std::min(j + jj, j1 - 1) * ldb;
    __m512 acc[M][J];
    for (int i = 0; i < M; ++i)
      for (int jj = 0; jj < J; ++jj) acc[i][jj] = _mm512_setzero_ps();
    auto step = [&](int64_t kk, auto load) {
      __m512 a[M];
      for (int i = 0; i < M; ++i) a[i] = load(a_rows + i * k + kk);
      for (int jj = 0; jj < J; ++jj) {
        const __m512 bv = load(brow[jj] + kk);
        for (int i = 0; i < M; ++i) acc[i][jj] = _mm512_fmadd_ps(a[i], bv, acc[i][jj]);
      }
    };
    for (int64_t kk = 0; kk < k_full; kk += 16)
      step(kk, [](const float* p) { return _mm512_loadu_ps(p); });
    if (tail) step(k_full, [tail](const float* p) { return _mm512_maskz_loadu_ps(tail, p); });
    const __mmask8 columns = __mmask8((1u << std::min<int64_t>(J, j1 - j)) - 1);
    for (int i = 0; i < M; ++i) store_sums(sum_each(acc[i]), c + i * ldc + j, columns, alpha, beta);
  }
}
#pragma GCC diagnostic pop
#endif

template <typename T, int M>
void small_m(bool trans_b, int64_t j0, int64_t j1, int64_t k, T alpha, const T* a_rows, const T* b,
             int64_t ldb, T beta, T* c, int64_t ldc) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, float>)
    if (trans_b) return dot_rows_avx512<M>(j0, j1, k, alpha, a_rows, b, ldb, beta, c, ldc);
#endif
  if (trans_b)
    dot_rows<T, M>(j0, j1, k, alpha, a_rows, b, ldb, beta, c, ldc);
  else
    axpy_rows<T, M>(j0, j1, k, alpha, a_rows, b, ldb, beta, c, ldc);
}

}  // namespace

template <typename T>
void gemm_small_m(bool trans_a, bool trans_b, int64_t m, int64_t j0, int64_t j1, int64_t k, T alpha,
                  const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  QKV_CHECK(m >= 1 && m <= kSmallM && k > 0, "gemm_small_m", "needs 1 <= m <= ", kSmallM,
            " and k > 0, got m = ", m, ", k = ", k);
  // op(A)'s few rows, made contiguous: a transposed A would otherwise be read with stride lda in
  // the innermost loop. m * k elements, small by construction.
  thread_local std::vector<T> rows;
  rows.resize(size_t(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t t = 0; t < k; ++t)
      rows[size_t(i * k + t)] = trans_a ? a[t * lda + i] : a[i * lda + t];
  static_assert(kSmallM == 4, "one case below per row count");
  switch (m) {
    case 1:
      return small_m<T, 1>(trans_b, j0, j1, k, alpha, rows.data(), b, ldb, beta, c, ldc);
    case 2:
      return small_m<T, 2>(trans_b, j0, j1, k, alpha, rows.data(), b, ldb, beta, c, ldc);
    case 3:
      return small_m<T, 3>(trans_b, j0, j1, k, alpha, rows.data(), b, ldb, beta, c, ldc);
    default:
      return small_m<T, 4>(trans_b, j0, j1, k, alpha, rows.data(), b, ldb, beta, c, ldc);
  }
}

template void gemm_small_m<float>(bool, bool, int64_t, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, const float*, int64_t, float, float*,
                                  int64_t);
template void gemm_small_m<double>(bool, bool, int64_t, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, const double*, int64_t, double, double*,
                                   int64_t);

}  // namespace qkv::cpu
