// The 1x1 convolution (see pointwise_conv.h): a gather, two register tiles and a scatter.
//
// The functions carry target("avx512f") instead of relying on -march: this file is compiled into
// every build and only called after cpuid says the CPU has AVX-512F.
#include "engine/cpu/pointwise_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/cpu/avx512_target.h"

namespace qkv::cpu {

namespace {

constexpr int64_t kLanes = 16;
constexpr __mmask16 kEvenLanes = 0x5555;  // where stride 2's scatter puts its values

// The product's tile: out rows [0, MB) (a and out already at the tile's first row) at positions
// [l0, l0 + 16 NV), the last vector's lanes cut by `last`.
template <int MB, int NV>
QKV_AVX512_INLINE void product_tile(int64_t K, int64_t L, const float* a, int64_t a_m, int64_t a_k,
                                    const float* b, const float* bias, float* out, int64_t l0,
                                    __mmask16 last) {
  __m512 acc[MB][NV];
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = bias ? _mm512_set1_ps(bias[m]) : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* row = b + k * L + l0;
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, row + v * kLanes)
                          : _mm512_loadu_ps(row + v * kLanes);
    for (int m = 0; m < MB; ++m) {
      const __m512 am = _mm512_set1_ps(a[m * a_m + k * a_k]);
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(am, bv[v], acc[m][v]);
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < NV; ++v) {
      float* at = out + m * L + l0 + v * kLanes;
      if (v == NV - 1)
        _mm512_mask_storeu_ps(at, last, acc[m][v]);
      else
        _mm512_storeu_ps(at, acc[m][v]);
    }
}

// Rows [0, MB) of the product at every position, three vectors at a time.
template <int MB>
QKV_AVX512_INLINE void product_rows(int64_t K, int64_t L, const float* a, int64_t a_m, int64_t a_k,
                                    const float* b, const float* bias, float* out) {
  constexpr int64_t kBlock = 3 * kLanes;
  for (int64_t l0 = 0; l0 < L; l0 += kBlock) {
    const int64_t n = std::min(kBlock, L - l0), vectors = (n + kLanes - 1) / kLanes;
    const __mmask16 last = lanes_below(n - (vectors - 1) * kLanes);
    if (vectors == 3)
      product_tile<MB, 3>(K, L, a, a_m, a_k, b, bias, out, l0, last);
    else if (vectors == 2)
      product_tile<MB, 2>(K, L, a, a_m, a_k, b, bias, out, l0, last);
    else
      product_tile<MB, 1>(K, L, a, a_m, a_k, b, bias, out, l0, last);
  }
}

// The weight gradient's tile: weights (o, c) for o in [0, OB), c in [0, CB) (gy, xs and lanes
// already at the tile's first), their 16 lanes loaded from `lanes`, the images' products added,
// and stored back.
template <int OB, int CB>
QKV_AVX512_INLINE void weight_grad_tile(const PointwiseConvShape& s, int64_t images,
                                        const float* gy, const float* xs, float* lanes) {
  const int64_t C = s.C, L = s.L;
  __m512 acc[OB][CB];
  for (int o = 0; o < OB; ++o)
    for (int c = 0; c < CB; ++c) acc[o][c] = _mm512_loadu_ps(lanes + (o * C + c) * kLanes);
  for (int64_t n = 0; n < images; ++n) {
    const float* gyn = gy + n * s.O * L;
    const float* xsn = xs + n * C * L;
    for (int64_t l0 = 0; l0 < L; l0 += kLanes) {
      const __mmask16 inside = lanes_below(L - l0);
      __m512 g[OB], x[CB];
      for (int o = 0; o < OB; ++o) g[o] = _mm512_maskz_loadu_ps(inside, gyn + o * L + l0);
      for (int c = 0; c < CB; ++c) x[c] = _mm512_maskz_loadu_ps(inside, xsn + c * L + l0);
      for (int o = 0; o < OB; ++o)
        for (int c = 0; c < CB; ++c) acc[o][c] = _mm512_fmadd_ps(g[o], x[c], acc[o][c]);
    }
  }
  for (int o = 0; o < OB; ++o)
    for (int c = 0; c < CB; ++c) _mm512_storeu_ps(lanes + (o * C + c) * kLanes, acc[o][c]);
}

// Output channels [0, OB) against every input channel, four at a time and then two and one.
template <int OB>
QKV_AVX512_INLINE void weight_grad_rows(const PointwiseConvShape& s, int64_t images,
                                        const float* gy, const float* xs, float* lanes) {
  const int64_t C = s.C, L = s.L;
  int64_t c = 0;
  for (; c + 4 <= C; c += 4) weight_grad_tile<OB, 4>(s, images, gy, xs + c * L, lanes + c * kLanes);
  for (; c + 2 <= C; c += 2) weight_grad_tile<OB, 2>(s, images, gy, xs + c * L, lanes + c * kLanes);
  for (; c < C; ++c) weight_grad_tile<OB, 1>(s, images, gy, xs + c * L, lanes + c * kLanes);
}

// Asks for the cache lines of floats [row, row + floats) (from memory into L1).
QKV_AVX512_INLINE void prefetch_row(const float* row, int64_t floats) {
  for (int64_t i = 0; i < floats; i += kLanes)
    _mm_prefetch(reinterpret_cast<const char*>(row + i), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(row + floats - 1), _MM_HINT_T0);
}

// The row's lanes `inside` at `at` = spread, whose odd lanes are zero; with `accumulate` the
// even lanes are added into the row and the odd ones left as they are.
QKV_AVX512_INLINE void put_even_lanes(float* at, __mmask16 inside, __m512 spread, bool accumulate) {
  if (accumulate) {
    prefetch_ahead(at);  // the masked load's line does not train the prefetcher
    const __m512 sum = _mm512_maskz_loadu_ps(inside, at);
    spread = _mm512_mask_add_ps(sum, kEvenLanes, sum, spread);
  }
  _mm512_mask_storeu_ps(at, inside, spread);
}

}  // namespace

QKV_AVX512 void pointwise_conv_gather(const PointwiseConvShape& s, const float* x, float* xs,
                                      const float* next) {
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t ho = 0; ho < s.Ho; ++ho) {
      const int64_t offset = (c * s.H + ho * s.stride) * s.W;
      const float* row = x + offset;
      float* dst = xs + (c * s.Ho + ho) * s.Wo;
      // The hardware prefetchers do not follow a read that skips rows; this image's rows were
      // asked for while the one before it was gathered.
      if (next) prefetch_row(next + offset, s.W);
      if (s.stride != 2) {
        for (int64_t wo = 0; wo < s.Wo; ++wo) dst[wo] = row[wo * s.stride];
        continue;
      }
      // the even columns of 32, from two masked loads, in one permutation
      const __m512i evens =
          _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      for (int64_t wo = 0; wo < s.Wo; wo += kLanes) {
        const int64_t col = 2 * wo;
        const __m512 lo = _mm512_maskz_loadu_ps(lanes_below(s.W - col), row + col);
        const __m512 hi =
            _mm512_maskz_loadu_ps(lanes_below(s.W - col - kLanes), row + col + kLanes);
        _mm512_mask_storeu_ps(dst + wo, lanes_below(s.Wo - wo),
                              _mm512_permutex2var_ps(lo, evens, hi));
      }
    }
}

QKV_AVX512 void pointwise_conv_scatter(const PointwiseConvShape& s, const float* gxs, float* gx,
                                       bool accumulate) {
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t h = 0; h < s.H; ++h) {
      float* row = gx + (c * s.H + h) * s.W;
      if (h % s.stride != 0) {
        if (!accumulate) std::memset(row, 0, sizeof(float) * size_t(s.W));
        continue;
      }
      const float* src = gxs + (c * s.Ho + h / s.stride) * s.Wo;
      if (s.stride != 2) {
        if (accumulate) {
          for (int64_t wo = 0; wo < s.Wo; ++wo) row[wo * s.stride] += src[wo];
          continue;
        }
        std::fill(row, row + s.W, 0.0f);
        for (int64_t wo = 0; wo < s.Wo; ++wo) row[wo * s.stride] = src[wo];
        continue;
      }
      // 16 values spread over the even lanes of two vectors; the odd lanes zero, or where the
      // values are added into the row, left as they are
      const __m512i low_half = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
      const __m512i high_half =
          _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
      for (int64_t wo = 0; wo < s.Wo; wo += kLanes) {
        const int64_t col = 2 * wo;
        const __m512 v = _mm512_maskz_loadu_ps(lanes_below(s.Wo - wo), src + wo);
        put_even_lanes(row + col, lanes_below(s.W - col),
                       _mm512_maskz_permutexvar_ps(kEvenLanes, low_half, v), accumulate);
        put_even_lanes(row + col + kLanes, lanes_below(s.W - col - kLanes),
                       _mm512_maskz_permutexvar_ps(kEvenLanes, high_half, v), accumulate);
      }
    }
}

QKV_AVX512 void pointwise_conv_product(int64_t M, int64_t K, int64_t L, const float* a, int64_t a_m,
                                       int64_t a_k, const float* b, const float* bias, float* out) {
  int64_t m = 0;
  auto at = [&](int64_t row) { return bias ? bias + row : nullptr; };
  for (; m + 8 <= M; m += 8) product_rows<8>(K, L, a + m * a_m, a_m, a_k, b, at(m), out + m * L);
  for (; m + 4 <= M; m += 4) product_rows<4>(K, L, a + m * a_m, a_m, a_k, b, at(m), out + m * L);
  for (; m + 2 <= M; m += 2) product_rows<2>(K, L, a + m * a_m, a_m, a_k, b, at(m), out + m * L);
  for (; m < M; ++m) product_rows<1>(K, L, a + m * a_m, a_m, a_k, b, at(m), out + m * L);
}

QKV_AVX512 void pointwise_conv_weight_grad(const PointwiseConvShape& s, int64_t images,
                                           const float* gy, const float* xs, float* lanes) {
  int64_t o = 0;
  const int64_t L = s.L, row = s.C * kLanes;  // one output channel's lanes
  for (; o + 4 <= s.O; o += 4) weight_grad_rows<4>(s, images, gy + o * L, xs, lanes + o * row);
  for (; o + 2 <= s.O; o += 2) weight_grad_rows<2>(s, images, gy + o * L, xs, lanes + o * row);
  for (; o < s.O; ++o) weight_grad_rows<1>(s, images, gy + o * L, xs, lanes + o * row);
}

QKV_AVX512 void pointwise_conv_add_lanes(int64_t count, const float* lanes, float* gw) {
  for (int64_t i = 0; i < count; ++i)
    gw[i] = _mm512_reduce_add_ps(_mm512_loadu_ps(lanes + i * kLanes));
}

}  // namespace qkv::cpu
