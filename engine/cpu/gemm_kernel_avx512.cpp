// The AVX-512 microkernel: a 12 x 32 float (12 x 16 double) tile of C held in 24 zmm registers.
//
// Each step of k loads two vectors of the B micro-panel and, for each of the 12 rows, broadcasts
// one A value and issues two FMAs: 24 independent FMAs per step hide the FMA latency (4 cycles x 2
// ports = 8 in flight needed) and cost only 2 vector loads plus 12 broadcasts, which are
// broadcast-loads (load ports, not the shuffle port). 24 accumulators + 2 B vectors + 1 broadcast
// = 27 of the 32 zmm registers, so nothing spills.
//
// The functions carry target("avx512f") instead of relying on -march: this file is compiled into
// every build and only called after cpuid says the CPU has AVX-512.
#include <immintrin.h>

#include <array>
#include <utility>

#include "engine/cpu/avx512_target.h"
#include "engine/cpu/gemm_kernel.h"
#include "engine/cpu/gemm_pack.h"

namespace qkv::cpu {
namespace {

template <typename T>
struct Zmm;

template <>
struct Zmm<float> {
  using Vec = __m512;
  static constexpr int width = 16;
  QKV_AVX512_INLINE static Vec zero() { return _mm512_setzero_ps(); }
  QKV_AVX512_INLINE static Vec loadu(const float* p) { return _mm512_loadu_ps(p); }
  QKV_AVX512_INLINE static Vec load(const float* p, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, p);
  }
  QKV_AVX512_INLINE static void store(float* p, __mmask16 m, Vec v) {
    _mm512_mask_storeu_ps(p, m, v);
  }
  QKV_AVX512_INLINE static Vec broadcast(float x) { return _mm512_set1_ps(x); }
  QKV_AVX512_INLINE static Vec mul(Vec x, Vec y) { return _mm512_mul_ps(x, y); }
  QKV_AVX512_INLINE static Vec fma(Vec x, Vec y, Vec z) { return _mm512_fmadd_ps(x, y, z); }
  QKV_AVX512_INLINE static Vec max(Vec x, Vec y) { return _mm512_max_ps(x, y); }
};

template <>
struct Zmm<double> {
  using Vec = __m512d;
  static constexpr int width = 8;
  QKV_AVX512_INLINE static Vec zero() { return _mm512_setzero_pd(); }
  QKV_AVX512_INLINE static Vec loadu(const double* p) { return _mm512_loadu_pd(p); }
  QKV_AVX512_INLINE static Vec load(const double* p, __mmask16 m) {
    return _mm512_maskz_loadu_pd(__mmask8(m), p);
  }
  QKV_AVX512_INLINE static void store(double* p, __mmask16 m, Vec v) {
    _mm512_mask_storeu_pd(p, __mmask8(m), v);
  }
  QKV_AVX512_INLINE static Vec broadcast(double x) { return _mm512_set1_pd(x); }
  QKV_AVX512_INLINE static Vec mul(Vec x, Vec y) { return _mm512_mul_pd(x, y); }
  QKV_AVX512_INLINE static Vec fma(Vec x, Vec y, Vec z) { return _mm512_fmadd_pd(x, y, z); }
  QKV_AVX512_INLINE static Vec max(Vec x, Vec y) { return _mm512_max_pd(x, y); }
};

// R rows (R <= MR, the packed panel's row stride) x NV vectors of C, of which the first `cols`
// columns are stored. Ragged edges of C are handled here, with masked loads and stores and a
// smaller R, so the driver never needs a scratch tile and the edge costs only what it computes.
// A is read depth-major, a[p * lda + i]: a packed panel (lda == MR) or, for products with few
// column tiles, op(A) = A^T read in place; or, with kAInPlace, row-major as stored (a[i * lda +
// p]). kPrefetchB > 0 prefetches B's row that many depth steps ahead (both lines of a 32-float
// row).
//
// With `bias` (cols values) and `relu`, the tile is finished as it is stored: C = max(alpha A B +
// beta C + bias, 0), the epilogue (gemm.h) of a product whose depth is one block.
template <typename T, int MR, int R, int NV, bool kAInPlace, int kPrefetchB = 0>
QKV_AVX512 void avx512_tile(int64_t kc, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                            int64_t ldc, T alpha, T beta, int cols, const T* bias, bool relu) {
  using V = Zmm<T>;
  constexpr int W = V::width;
  typename V::Vec acc[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = V::zero();

#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p, a += kAInPlace ? 1 : lda, b += ldb) {
    typename V::Vec bv[NV];
    if constexpr (kPrefetchB > 0)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * ldb + j * W), _MM_HINT_T0);
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = V::loadu(b + j * W);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      typename V::Vec ai = V::broadcast(kAInPlace ? a[i * lda] : a[i]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = V::fma(ai, bv[j], acc[i][j]);
    }
  }

  __mmask16 mask[NV];
#pragma GCC unroll 4
  for (int j = 0; j < NV; ++j) mask[j] = lanes_below(cols - j * W);
  const typename V::Vec va = V::broadcast(alpha);
  if (bias || relu) {
    typename V::Vec bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = bias ? V::load(bias + j * W, mask[j]) : V::zero();
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        T* cij = c + i * ldc + j * W;
        typename V::Vec v = V::fma(va, acc[i][j], bv[j]);
        if (beta != T(0)) v = V::fma(V::broadcast(beta), V::load(cij, mask[j]), v);
        if (relu) v = V::max(V::zero(), v);  // max(0, NaN) is NaN, as relu() leaves it
        V::store(cij, mask[j], v);
      }
    return;
  }
  if (beta == T(0)) {  // C is write-only: it may hold NaN
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) V::store(c + i * ldc + j * W, mask[j], V::mul(va, acc[i][j]));
  } else {
    const typename V::Vec vb = V::broadcast(beta);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        T* cij = c + i * ldc + j * W;
        V::store(cij, mask[j], V::fma(va, acc[i][j], V::mul(vb, V::load(cij, mask[j]))));
      }
  }
}

// One instantiation per row count, indexed by rows - 1.
template <typename T, int MR, int NV, bool kAInPlace, int kPrefetchB, int... R>
constexpr auto tile_table(std::integer_sequence<int, R...>) {
  using Tile = void (*)(int64_t, const T*, int64_t, const T*, int64_t, T*, int64_t, T, T, int,
                        const T*, bool);
  return std::array<Tile, MR>{avx512_tile<T, MR, R + 1, NV, kAInPlace, kPrefetchB>...};
}

// How many depth steps ahead the B-prefetching kernel asks for a row: a few hundred cycles of
// FMAs, about a memory latency.
constexpr int kPrefetchDistance = 16;

// op(A) = A^T read in place, its rows lda apart; a packed panel is the case lda == MR.
template <typename T, int MR, int NV, int kPrefetchB = 0>
void avx512_kernel_a_transposed_in_place(int64_t kc, const T* a, int64_t lda, const T* b,
                                         int64_t ldb, T* c, int64_t ldc, T alpha, T beta, int rows,
                                         int cols) {
  static constexpr auto tiles =
      tile_table<T, MR, NV, false, kPrefetchB>(std::make_integer_sequence<int, MR>());
  tiles[rows - 1](kc, a, lda, b, ldb, c, ldc, alpha, beta, cols, nullptr, false);
}

// A packed A panel is op(A) = A^T in place with lda == MR.
template <typename T, int MR, int NV>
void avx512_kernel_finishing(int64_t kc, const T* a, const T* b, int64_t ldb, T* c, int64_t ldc,
                             T alpha, T beta, int rows, int cols, const T* bias, bool relu) {
  static constexpr auto tiles =
      tile_table<T, MR, NV, false, 0>(std::make_integer_sequence<int, MR>());
  tiles[rows - 1](kc, a, MR, b, ldb, c, ldc, alpha, beta, cols, bias, relu);
}

template <typename T, int MR, int NV>
void avx512_kernel(int64_t kc, const T* a, const T* b, int64_t ldb, T* c, int64_t ldc, T alpha,
                   T beta, int rows, int cols) {
  avx512_kernel_finishing<T, MR, NV>(kc, a, b, ldb, c, ldc, alpha, beta, rows, cols, nullptr,
                                     false);
}

template <typename T, int MR, int NV>
void avx512_kernel_a_in_place_finishing(int64_t kc, const T* a, int64_t lda, const T* b,
                                        int64_t ldb, T* c, int64_t ldc, T alpha, T beta, int rows,
                                        int cols, const T* bias, bool relu) {
  static constexpr auto tiles =
      tile_table<T, MR, NV, true, 0>(std::make_integer_sequence<int, MR>());
  tiles[rows - 1](kc, a, lda, b, ldb, c, ldc, alpha, beta, cols, bias, relu);
}

template <typename T, int MR, int NV>
void avx512_kernel_a_in_place(int64_t kc, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                              int64_t ldc, T alpha, T beta, int rows, int cols) {
  avx512_kernel_a_in_place_finishing<T, MR, NV>(kc, a, lda, b, ldb, c, ldc, alpha, beta, rows, cols,
                                                nullptr, false);
}

bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }

}  // namespace

template <>
const GemmMicrokernel<float>* gemm_kernel_avx512<float>() {
  static const GemmMicrokernel<float> k{
      "avx512",
      12,
      32,
      3072,
      384,
      512,
      avx512_kernel<float, 12, 2>,
      pack_transposed_avx512<float>,
      avx512_kernel_a_in_place<float, 12, 2>,
      avx512_kernel_a_transposed_in_place<float, 12, 2>,
      avx512_kernel_a_transposed_in_place<float, 12, 2, kPrefetchDistance>,
      avx512_kernel_a_in_place_finishing<float, 12, 2>,
      avx512_kernel_finishing<float, 12, 2>};
  return cpu_has_avx512() ? &k : nullptr;
}

template <>
const GemmMicrokernel<double>* gemm_kernel_avx512<double>() {
  static const GemmMicrokernel<double> k{
      "avx512",
      12,
      16,
      3072,
      256,
      384,
      avx512_kernel<double, 12, 2>,
      pack_transposed_avx512<double>,
      avx512_kernel_a_in_place<double, 12, 2>,
      avx512_kernel_a_transposed_in_place<double, 12, 2>,
      avx512_kernel_a_transposed_in_place<double, 12, 2, kPrefetchDistance>,
      avx512_kernel_a_in_place_finishing<double, 12, 2>,
      avx512_kernel_finishing<double, 12, 2>};
  return cpu_has_avx512() ? &k : nullptr;
}

}  // namespace qkv::cpu
