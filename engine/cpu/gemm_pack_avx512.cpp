// The transposing case of packing, with AVX-512: A as stored (rows run along k) or B transposed.
//
// The portable loop moves one value per load and store. Here a square of W x W values (16 floats
// or 8 doubles per vector) is loaded as W vectors, one per line, transposed in registers with
// three (floats: four) rounds of shuffles, and stored as W depth steps of the panel. That matters
// most where packing A is a large share of the work: small n, and small products.
#include <immintrin.h>

#include "engine/cpu/avx512_target.h"
#include "engine/cpu/gemm_pack.h"

namespace qkv::cpu {
namespace {

// Transposes r[0..16) in place: afterwards r[p] holds value p of every input vector.
QKV_AVX512_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {  // pairs of lines interleaved: a0 b0 a1 b1 | a4 b4 a5 b5 ...
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {  // quads of lines: u[g + j] lane L holds value 4L + j
    const __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]);
    const __m512d t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
    u[g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int j = 0; j < 4; ++j) {  // gather the four 128-bit lanes holding values j, 4+j, 8+j, 12+j
    __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
    __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
    __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    r[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

QKV_AVX512_INLINE void transpose8(__m512d r[8]) {
  __m512d t[8], u[8];
  for (int i = 0; i < 8; i += 2) {  // a0 b0 | a2 b2 | a4 b4 | a6 b6 and the odd values
    t[i] = _mm512_unpacklo_pd(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_pd(r[i], r[i + 1]);
  }
  for (int g = 0; g < 8; g += 4) {
    u[g + 0] = _mm512_shuffle_f64x2(t[g], t[g + 2], 0x88);      // values 0, 4
    u[g + 1] = _mm512_shuffle_f64x2(t[g], t[g + 2], 0xdd);      // values 2, 6
    u[g + 2] = _mm512_shuffle_f64x2(t[g + 1], t[g + 3], 0x88);  // values 1, 5
    u[g + 3] = _mm512_shuffle_f64x2(t[g + 1], t[g + 3], 0xdd);  // values 3, 7
  }
  const int first[4] = {0, 2, 1, 3};
  for (int j = 0; j < 4; ++j) {
    r[first[j]] = _mm512_shuffle_f64x2(u[j], u[4 + j], 0x88);
    r[first[j] + 4] = _mm512_shuffle_f64x2(u[j], u[4 + j], 0xdd);
  }
}

template <typename T>
struct Square;
template <>
struct Square<float> {
  using Vec = __m512;
  static constexpr int W = 16;
  QKV_AVX512_INLINE static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  QKV_AVX512_INLINE static Vec zero() { return _mm512_setzero_ps(); }
  QKV_AVX512_INLINE static void transpose(Vec* r) { transpose16(r); }
  QKV_AVX512_INLINE static void store(float* p, __mmask16 m, Vec v) {
    _mm512_mask_storeu_ps(p, m, v);
  }
};
template <>
struct Square<double> {
  using Vec = __m512d;
  static constexpr int W = 8;
  QKV_AVX512_INLINE static Vec load(const double* p) { return _mm512_loadu_pd(p); }
  QKV_AVX512_INLINE static Vec zero() { return _mm512_setzero_pd(); }
  QKV_AVX512_INLINE static void transpose(Vec* r) { transpose8(r); }
  QKV_AVX512_INLINE static void store(double* p, __mmask16 m, Vec v) {
    _mm512_mask_storeu_pd(p, __mmask8(m), v);
  }
};

template <typename T>
__attribute__((target("avx512f"))) void pack_transposed(const T* src, int64_t line_stride,
                                                        int64_t lines, int64_t depth, int width,
                                                        T* dst) {
  using S = Square<T>;
  constexpr int W = S::W;
  int64_t p = 0;
  for (; p + W <= depth; p += W) {
    for (int g = 0; g < width; g += W) {  // lines in groups of W; missing lines read as zero
      typename S::Vec r[W];
      for (int q = 0; q < W; ++q)
        r[q] = g + q < lines ? S::load(src + (g + q) * line_stride + p) : S::zero();
      S::transpose(r);
      const int count = width - g < W ? width - g : W;
      const __mmask16 mask = __mmask16((1u << count) - 1);
      for (int pp = 0; pp < W; ++pp) S::store(dst + (p + pp) * width + g, mask, r[pp]);
    }
  }
  for (; p < depth; ++p)  // the last depth % W steps one value at a time
    for (int q = 0; q < width; ++q)
      dst[p * width + q] = q < lines ? src[q * line_stride + p] : T(0);
}

}  // namespace

// A plain function around the target("avx512f") one: GCC takes a template's target attribute
// from its first declaration, the one in gemm_pack.h, which must stay ISA-neutral.
template <typename T>
void pack_transposed_avx512(const T* src, int64_t line_stride, int64_t lines, int64_t depth,
                            int width, T* dst) {
  pack_transposed(src, line_stride, lines, depth, width, dst);
}

template void pack_transposed_avx512<float>(const float*, int64_t, int64_t, int64_t, int, float*);
template void pack_transposed_avx512<double>(const double*, int64_t, int64_t, int64_t, int,
                                             double*);

}  // namespace qkv::cpu
