// The AVX2+FMA microkernel: a 6 x 16 float (6 x 8 double) tile of C held in 12 ymm registers.
//
// The same scheme as the AVX-512 kernel on 16 registers instead of 32: each step of k loads two B
// vectors and, per row, broadcasts one A value into two FMAs. 12 accumulators + 2 B vectors +
// 1 broadcast = 15 of the 16 ymm registers; 12 independent FMAs cover the FMA latency on 2 ports.
//
// target("avx2,fma") lets this file compile in any x86-64 build; it runs only after cpuid agrees.
#include <immintrin.h>

#include "engine/cpu/gemm_kernel.h"

#define QKV_AVX2 __attribute__((target("avx2,fma")))
#define QKV_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace qkv::cpu {
namespace {

template <typename T>
struct Ymm;

template <>
struct Ymm<float> {
  using Vec = __m256;
  static constexpr int width = 8;
  QKV_AVX2_INLINE static Vec zero() { return _mm256_setzero_ps(); }
  QKV_AVX2_INLINE static Vec loadu(const float* p) { return _mm256_loadu_ps(p); }
  QKV_AVX2_INLINE static void storeu(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  QKV_AVX2_INLINE static Vec broadcast(float x) { return _mm256_set1_ps(x); }
  QKV_AVX2_INLINE static Vec mul(Vec x, Vec y) { return _mm256_mul_ps(x, y); }
  QKV_AVX2_INLINE static Vec fma(Vec x, Vec y, Vec z) { return _mm256_fmadd_ps(x, y, z); }
};

template <>
struct Ymm<double> {
  using Vec = __m256d;
  static constexpr int width = 4;
  QKV_AVX2_INLINE static Vec zero() { return _mm256_setzero_pd(); }
  QKV_AVX2_INLINE static Vec loadu(const double* p) { return _mm256_loadu_pd(p); }
  QKV_AVX2_INLINE static void storeu(double* p, Vec v) { _mm256_storeu_pd(p, v); }
  QKV_AVX2_INLINE static Vec broadcast(double x) { return _mm256_set1_pd(x); }
  QKV_AVX2_INLINE static Vec mul(Vec x, Vec y) { return _mm256_mul_pd(x, y); }
  QKV_AVX2_INLINE static Vec fma(Vec x, Vec y, Vec z) { return _mm256_fmadd_pd(x, y, z); }
};

// MR rows x NV vectors of C.
template <typename T, int MR, int NV>
QKV_AVX2 void avx2_kernel(int64_t kc, const T* a, const T* b, int64_t ldb, T* c, int64_t ldc,
                          T alpha, T beta) {
  using V = Ymm<T>;
  constexpr int W = V::width;
  typename V::Vec acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = V::zero();

#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p, a += MR, b += ldb) {
    typename V::Vec bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = V::loadu(b + j * W);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      typename V::Vec ai = V::broadcast(a[i]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = V::fma(ai, bv[j], acc[i][j]);
    }
  }

  const typename V::Vec va = V::broadcast(alpha);
  if (beta == T(0)) {  // C is write-only: it may hold NaN
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) V::storeu(c + i * ldc + j * W, V::mul(va, acc[i][j]));
  } else {
    const typename V::Vec vb = V::broadcast(beta);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        T* cij = c + i * ldc + j * W;
        V::storeu(cij, V::fma(va, acc[i][j], V::mul(vb, V::loadu(cij))));
      }
  }
}

// A ragged tile at the edge of C: computed in full into a scratch tile, then merged. (AVX2 has
// masked stores only for 32- and 64-bit lanes and they are slow on some CPUs; edges are rare.)
template <typename T, int MR, int NV>
QKV_AVX2 void avx2_kernel_edges(int64_t kc, const T* a, const T* b, int64_t ldb, T* c, int64_t ldc,
                                T alpha, T beta, int rows, int cols) {
  constexpr int NR = NV * Ymm<T>::width;
  if (rows == MR && cols == NR) return avx2_kernel<T, MR, NV>(kc, a, b, ldb, c, ldc, alpha, beta);
  alignas(32) T tile[MR * NR];
  avx2_kernel<T, MR, NV>(kc, a, b, ldb, tile, NR, alpha, T(0));
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      T prior = beta == T(0) ? T(0) : beta * c[i * ldc + j];
      c[i * ldc + j] = tile[i * NR + j] + prior;
    }
}

bool cpu_has_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

}  // namespace

template <>
const GemmMicrokernel<float>* gemm_kernel_avx2<float>() {
  static const GemmMicrokernel<float> k{
      "avx2", 6, 16, 3072, 256, 512, avx2_kernel_edges<float, 6, 2>};
  return cpu_has_avx2_fma() ? &k : nullptr;
}

template <>
const GemmMicrokernel<double>* gemm_kernel_avx2<double>() {
  static const GemmMicrokernel<double> k{
      "avx2", 6, 8, 3072, 256, 384, avx2_kernel_edges<double, 6, 2>};
  return cpu_has_avx2_fma() ? &k : nullptr;
}

}  // namespace qkv::cpu
