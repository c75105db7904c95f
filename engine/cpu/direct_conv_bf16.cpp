// The direct convolution's forward on VDPBF16PS (see direct_conv_bf16.h).
//
// The functions carry target attributes instead of relying on -march: this file is compiled into
// every build and only called where bf16_kernel() chose VDPBF16PS, which implies AVX512-BF16,
// AVX-512BW and VL.
#include "engine/cpu/direct_conv_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/cpu/avx512_target.h"
#include "engine/cpu/bf16_vectors.h"
#include "engine/cpu/direct_conv_tiles.h"
#include "engine/cpu/gemm_bf16.h"
#include "engine/dtype.h"

namespace qkv::cpu {

namespace {

constexpr int64_t kLanes = 16;

// One tile: outputs [o0, o0 + OB) at positions [q0, q0 + 16 V), into yq's rows.
template <int OB, int V>
QKV_BF16_INLINE void forward_tile(const DirectConvShape& s, const uint32_t* xp, const uint32_t* wp,
                                  const float* bias, const int64_t* offsets, int64_t taps,
                                  int64_t o0, int64_t q0, float* yq) {
  __m512 acc[OB][V];
  for (int t = 0; t < OB; ++t) {
    const __m512 b = _mm512_set1_ps(bias ? bias[o0 + t] : 0.f);
    for (int v = 0; v < V; ++v) acc[t][v] = b;
  }
  for (int64_t k = 0; k < taps; ++k) {
    const uint32_t* xk = xp + offsets[k] + q0;
    __m512bh xv[V];
    for (int v = 0; v < V; ++v) xv[v] = __m512bh(_mm512_loadu_si512(xk + kLanes * v));
    const uint32_t* wk = wp + k * s.O + o0;
    for (int t = 0; t < OB; ++t) {
      const __m512bh w = __m512bh(_mm512_set1_epi32(int(wk[t])));
      for (int v = 0; v < V; ++v) acc[t][v] = _mm512_dpbf16_ps(acc[t][v], xv[v], w);
    }
  }
  for (int t = 0; t < OB; ++t)
    for (int v = 0; v < V; ++v) _mm512_store_ps(yq + (o0 + t) * s.Qs + q0 + kLanes * v, acc[t][v]);
}

// Every output channel at positions [q0, q0 + 16 V): blocks of 8 channels, then 4, 2, 1.
template <int V>
QKV_BF16_VECTORS void forward_positions(const DirectConvShape& s, const uint32_t* xp,
                                        const uint32_t* wp, const float* bias,
                                        const int64_t* offsets, int64_t taps, int64_t q0,
                                        float* yq) {
  int64_t o0 = 0;
  for (; o0 + 8 <= s.O; o0 += 8) forward_tile<8, V>(s, xp, wp, bias, offsets, taps, o0, q0, yq);
  if (o0 + 4 <= s.O) forward_tile<4, V>(s, xp, wp, bias, offsets, taps, o0, q0, yq), o0 += 4;
  if (o0 + 2 <= s.O) forward_tile<2, V>(s, xp, wp, bias, offsets, taps, o0, q0, yq), o0 += 2;
  if (o0 < s.O) forward_tile<1, V>(s, xp, wp, bias, offsets, taps, o0, q0, yq);
}

// One tile of the weight gradient: gw[o0 + t][k0 + u] += sum over the images and positions of
// gyq[n][o0 + t][q] * xp[n][off[k0 + u] + q].
template <int OB, int KB>
QKV_BF16_INLINE void weight_grad_tile(const DirectConvShape& s, int64_t images, const bf16_t* xp,
                                      const bf16_t* gyq, const int64_t* off, int64_t o0, int64_t k0,
                                      float* gw) {
  __m512 acc[OB][KB];
  for (int t = 0; t < OB; ++t)
    for (int u = 0; u < KB; ++u) acc[t][u] = _mm512_setzero_ps();
  const int64_t row = bf16_gy_row(s), image_values = bf16_padded_values(s);
  for (int64_t n = 0; n < images; ++n) {
    const bf16_t* x = xp + n * image_values;
    const bf16_t* g = gyq + (n * s.O + o0) * row;
    for (int64_t q = 0; q < row; q += 2 * kLanes) {
      __m512bh gv[OB];
      for (int t = 0; t < OB; ++t) gv[t] = __m512bh(_mm512_loadu_si512(g + t * row + q));
      for (int u = 0; u < KB; ++u) {
        const __m512bh xv = __m512bh(_mm512_loadu_si512(x + off[k0 + u] + q));
        for (int t = 0; t < OB; ++t) acc[t][u] = _mm512_dpbf16_ps(acc[t][u], gv[t], xv);
      }
    }
  }
  for (int t = 0; t < OB; ++t)
    for (int u = 0; u < KB; ++u) gw[(o0 + t) * s.K + k0 + u] += _mm512_reduce_add_ps(acc[t][u]);
}

// One tile of the weight gradient in channel lanes: gwt[(r0 + r) * 3 + j][o0, o0 + 16 OV) += the
// sum over the images' pairs of positions, for the 3 taps j of rows [r0, r0 + ROWS) (a row is an
// input channel c and a kernel row i: r = c * kh + i). Tap j of an output at column ow reads
// phase j % S of its row at column ow + j / S; the pair (ow, ow + 1) reads two consecutive values
// there.
template <int ROWS, int OV, int S>
QKV_BF16_INLINE void channel_lanes_tile(const DirectConvShape& s, int64_t images, const bf16_t* xp,
                                        const uint32_t* gyp, int64_t r0, int64_t o0, float* gwt) {
  __m512 acc[ROWS][3][OV];
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < 3; ++j)
      for (int v = 0; v < OV; ++v) acc[r][j][v] = _mm512_setzero_ps();
  const int64_t pairs = (s.Wo + 1) / 2;
  for (int64_t n = 0; n < images; ++n) {
    const bf16_t* x = xp + n * bf16_padded_values(s);
    const bf16_t* rows[ROWS][S];
    for (int r = 0; r < ROWS; ++r) {
      const int64_t c = (r0 + r) / s.kh, i = (r0 + r) % s.kh;
      for (int b = 0; b < S; ++b)
        rows[r][b] = x + ((c * S + i % S) * S + b) * s.plane + i / S * s.Wq;
    }
    const uint32_t* g = gyp + n * bf16_gy_pair_words(s) + o0;
    for (int64_t oh = 0; oh < s.Ho; ++oh)
      for (int64_t pair = 0; pair < pairs; ++pair, g += s.O) {
        const int64_t q = oh * s.Wq + 2 * pair;
        __m512bh gv[OV];
        for (int v = 0; v < OV; ++v) gv[v] = __m512bh(_mm512_loadu_si512(g + kLanes * v));
        for (int r = 0; r < ROWS; ++r)
          for (int j = 0; j < 3; ++j) {
            int32_t values;  // two bfloat16, at any (2-byte) alignment
            std::memcpy(&values, rows[r][j % S] + q + j / S, sizeof(values));
            const __m512bh xv = __m512bh(_mm512_set1_epi32(values));
            for (int v = 0; v < OV; ++v) acc[r][j][v] = _mm512_dpbf16_ps(acc[r][j][v], xv, gv[v]);
          }
      }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < 3; ++j)
      for (int v = 0; v < OV; ++v) {
        float* out = gwt + ((r0 + r) * 3 + j) * s.O + o0 + kLanes * v;
        _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), acc[r][j][v]));
      }
}

// Every row and output channel, ROWS rows at a time (then one at a time), 16 OV channels at a time.
template <int ROWS, int OV, int S>
QKV_BF16_VECTORS void channel_lanes_all(const DirectConvShape& s, int64_t images, const bf16_t* xp,
                                        const uint32_t* gyp, float* gwt) {
  const int64_t rows = s.C * s.kh;
  for (int64_t o0 = 0; o0 < s.O; o0 += kLanes * OV) {
    int64_t r0 = 0;
    for (; r0 + ROWS <= rows; r0 += ROWS)
      channel_lanes_tile<ROWS, OV, S>(s, images, xp, gyp, r0, o0, gwt);
    for (; r0 < rows; ++r0) channel_lanes_tile<1, OV, S>(s, images, xp, gyp, r0, o0, gwt);
  }
}

// 24 accumulators: 2 rows x 4 vectors of channels, 4 x 2 or 8 x 1.
template <int S>
QKV_BF16_VECTORS void channel_lanes_at_stride(const DirectConvShape& s, int64_t images,
                                              const bf16_t* xp, const uint32_t* gyp, float* gwt) {
  if (s.O % (4 * kLanes) == 0) return channel_lanes_all<2, 4, S>(s, images, xp, gyp, gwt);
  if (s.O % (2 * kLanes) == 0) return channel_lanes_all<4, 2, S>(s, images, xp, gyp, gwt);
  channel_lanes_all<8, 1, S>(s, images, xp, gyp, gwt);
}

// words[0, n) = the pairs (low[i], high[i]) rounded to bfloat16, low in each word's low half;
// high null: zero.
QKV_BF16_INLINE void pair_words(const float* low, const float* high, int64_t n, uint32_t* words) {
  for (int64_t at = 0; at < n; at += kLanes) {
    const __mmask16 m = lanes_below(n - at);
    const __m512i lo = amx::load16_widened(low + at, m);
    const __m512i hi = high ? amx::load16_widened(high + at, m) : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(words + at, m, amx::interleave(lo, hi));
  }
}

// dst[0, width) = src[0, n) rounded to bfloat16, then zeros.
QKV_BF16_INLINE void round_row(const float* src, int64_t n, int64_t width, bf16_t* dst) {
  for (int64_t col = 0; col < width; col += kLanes) {
    const __m256i values =
        __m256i(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes_below(n - col), src + col)));
    _mm256_mask_storeu_epi16(dst + col, lanes_below(width - col), values);
  }
}

}  // namespace

QKV_BF16_VECTORS void direct_conv_bf16_pad_planes(const DirectConvShape& s, const float* x,
                                                  bf16_t* xp, float* scratch) {
  if (s.stride != 1) {
    // the float32 phase planes, rounded
    direct_conv_pad(s, x, scratch);
    const int64_t values = s.C * s.stride * s.stride * s.plane;
    round_row(scratch, values, values, xp);
    std::fill(xp + values, xp + bf16_padded_values(s), bf16_t{0});
    return;
  }
  std::fill(xp, xp + bf16_padded_values(s), bf16_t{0});
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t h = 0; h < s.H; ++h)
      round_row(x + (c * s.H + h) * s.W, s.W, s.W, xp + c * s.plane + (s.ph + h) * s.Wp + s.pw);
}

QKV_BF16_VECTORS void direct_conv_bf16_gy_rows(const DirectConvShape& s, const float* gy,
                                               bf16_t* gyq) {
  const int64_t row = bf16_gy_row(s);
  for (int64_t o = 0; o < s.O; ++o) {
    bf16_t* r = gyq + o * row;
    for (int64_t oh = 0; oh < s.Ho; ++oh)
      round_row(gy + (o * s.Ho + oh) * s.Wo, s.Wo, s.Wq, r + oh * s.Wq);
    std::fill(r + s.Q, r + row, bf16_t{0});
  }
}

QKV_BF16_VECTORS void direct_conv_bf16_gy_pairs(const DirectConvShape& s, const float* gy,
                                                uint32_t* gyp, float* scratch) {
  direct_conv_gy_transposed(s, gy, scratch);  // [Ho * Wo, O]
  const int64_t pairs = (s.Wo + 1) / 2;
  for (int64_t oh = 0; oh < s.Ho; ++oh)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const float* first = scratch + (oh * s.Wo + 2 * pair) * s.O;
      const bool second = 2 * pair + 1 < s.Wo;
      pair_words(first, second ? first + s.O : nullptr, s.O, gyp + (oh * pairs + pair) * s.O);
    }
}

QKV_BF16_VECTORS void direct_conv_bf16_weight_grad_in_channel_lanes(
    const DirectConvShape& s, int64_t images, const bf16_t* xp, const uint32_t* gyp, float* gwt) {
  if (s.stride == 2) return channel_lanes_at_stride<2>(s, images, xp, gyp, gwt);
  channel_lanes_at_stride<1>(s, images, xp, gyp, gwt);
}

QKV_BF16_VECTORS void direct_conv_bf16_weight_grad(const DirectConvShape& s, int64_t images,
                                                   const bf16_t* xp, const bf16_t* gyq, float* gw) {
  const int64_t* off = s.tap_offsets.data();
  for_each_weight_grad_tile(s.O, s.K, [&]<int OB, int KB>(int64_t o0, int64_t k0) QKV_BF16_VECTORS {
    weight_grad_tile<OB, KB>(s, images, xp, gyq, off, o0, k0, gw);
  });
}

QKV_BF16_VECTORS void round_to_bf16_values(const float* x, int64_t n, float* out) {
  for (int64_t at = 0; at < n; at += kLanes) {
    const __mmask16 m = lanes_below(n - at);
    const __m512i bits = amx::load16_widened(x + at, m);
    _mm512_mask_storeu_ps(out + at, m, _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)));
  }
}

namespace {
std::atomic<bool> twin_turned_on{true};
}  // namespace

bool direct_conv_bf16_enabled() {
  return direct_conv_enabled() && bf16_kernel() == Bf16Kernel::avx512_bf16 &&
         twin_turned_on.load(std::memory_order_relaxed);
}

void set_direct_conv_bf16_enabled(bool on) { twin_turned_on.store(on, std::memory_order_relaxed); }

std::vector<uint32_t> direct_conv_bf16_weights(const DirectConvShape& s, const float* w) {
  const int64_t pairs = channel_pairs(s), taps = s.kh * s.kw;
  std::vector<uint32_t> wp(size_t(pairs * taps * s.O));
  for (int64_t p = 0; p < pairs; ++p)
    for (int64_t tap = 0; tap < taps; ++tap)
      for (int64_t o = 0; o < s.O; ++o) {
        const float* wo = w + o * s.C * taps + tap;
        const uint32_t low = float_to_bf16(wo[2 * p * taps]).bits;
        const uint32_t high = 2 * p + 1 < s.C ? float_to_bf16(wo[(2 * p + 1) * taps]).bits : 0;
        wp[size_t((p * taps + tap) * s.O + o)] = low | high << 16;
      }
  return wp;
}

QKV_BF16_VECTORS void direct_conv_bf16_pad(const DirectConvShape& s, const float* x, uint32_t* xp,
                                           float* scratch) {
  const int64_t pairs = channel_pairs(s);
  if (s.stride != 1) {
    // the float32 phase planes [C, stride^2, plane], then channel pairs of them
    direct_conv_pad(s, x, scratch);
    const int64_t values = s.stride * s.stride * s.plane;
    for (int64_t p = 0; p < pairs; ++p) {
      const float* low = scratch + 2 * p * values;
      pair_words(low, 2 * p + 1 < s.C ? low + values : nullptr, values, xp + p * values);
    }
    std::fill(xp + pairs * values, xp + bf16_pair_words(s), 0u);
    return;
  }
  std::fill(xp, xp + bf16_pair_words(s), 0u);
  for (int64_t p = 0; p < pairs; ++p) {
    const bool second = 2 * p + 1 < s.C;
    for (int64_t h = 0; h < s.H; ++h) {
      const float* low_row = x + (2 * p * s.H + h) * s.W;
      pair_words(low_row, second ? low_row + s.H * s.W : nullptr, s.W,
                 xp + p * s.plane + (s.ph + h) * s.Wp + s.pw);
    }
  }
}

QKV_BF16_VECTORS void direct_conv_bf16_forward(const DirectConvShape& s, const uint32_t* xp,
                                               const uint32_t* wp, const float* bias, float* yq,
                                               float* y) {
  // the taps of the channel pairs: (p, i, j) reads from q where channel p's tap (i, j) does in
  // DirectConvShape's tap_offsets (its phase plane, then the tap's row and column in it)
  const int64_t taps = channel_pairs(s) * s.kh * s.kw, S = s.stride;
  thread_local std::vector<int64_t> offsets;
  offsets.resize(size_t(taps));
  for (int64_t p = 0, k = 0; p < channel_pairs(s); ++p)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j)
        offsets[size_t(k++)] = ((p * S + i % S) * S + j % S) * s.plane + i / S * s.Wq + j / S;
  // tiles of 3 vectors, and the last 4, 2 or 1 as tiles of 2 and 1, as the float32 forward
  const int64_t vectors = s.Qs / kLanes;
  int64_t v = 0;
  for (; vectors - v >= 3 && vectors - v != 4; v += 3)
    forward_positions<3>(s, xp, wp, bias, offsets.data(), taps, v * kLanes, yq);
  for (; vectors - v >= 2; v += 2)
    forward_positions<2>(s, xp, wp, bias, offsets.data(), taps, v * kLanes, yq);
  if (v < vectors) forward_positions<1>(s, xp, wp, bias, offsets.data(), taps, v * kLanes, yq);
  for (int64_t o = 0; o < s.O; ++o)
    for (int64_t oh = 0; oh < s.Ho; ++oh)
      std::memcpy(y + (o * s.Ho + oh) * s.Wo, yq + o * s.Qs + oh * s.Wq,
                  sizeof(float) * size_t(s.Wo));
}

}  // namespace qkv::cpu
