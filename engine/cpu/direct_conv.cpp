// The direct convolution (see direct_conv.h): register tiles over padded planes.
//
// The functions carry target("avx512f") instead of relying on -march: this file is compiled into
// every build and only called after cpuid says the CPU has AVX-512F.
#include "engine/cpu/direct_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "engine/cpu/avx512_target.h"
#include "engine/cpu/direct_conv_tiles.h"
#include "engine/cpu/gemm_pack.h"
#include "engine/cpu/prefetch.h"

namespace qkv::cpu {

namespace {

std::atomic<bool> turned_on{true};

constexpr int64_t kLanes = 16;

// The 16 values of a padded row from column `col`: x_row[col - pw + l] where that is inside [0,
// W), else zero. The masked load touches only the lanes inside the row. Callers read rows in
// order, the input's and gy's from memory, hence the prefetch (for y's rows, copied from planes
// just computed, it is one spare instruction a vector).
QKV_AVX512_INLINE __m512 padded_vector(const float* x_row, int64_t W, int64_t pw, int64_t col) {
  const int64_t first = col - pw;  // the input column under lane 0
  prefetch_ahead(x_row + first);
  return _mm512_maskz_loadu_ps(lanes_between(-first, W - first), x_row + first);
}

// dst[0, width) = src[0, n), then zeros: a vector at a time, the masked loads touching only
// src[0, n).
QKV_AVX512_INLINE void copy_row(const float* src, int64_t n, int64_t width, float* dst) {
  for (int64_t col = 0; col < width; col += kLanes)
    _mm512_mask_storeu_ps(dst + col, lanes_below(width - col), padded_vector(src, n, 0, col));
}

// dst[0, n) = src[0, n), touching nothing past either: whole vectors by plain loads and stores,
// the rest (n >= 16) as the vector that ends at n, overlapping the one before; a row of fewer than
// 16 values is copy_row's one masked vector. A call of memcpy per row cost its 14 x 14 and 7 x 7
// paddings more than their copying (docs/CPU_KERNELS.md).
QKV_AVX512_INLINE void copy_values(const float* src, int64_t n, float* dst) {
  if (n < kLanes) return copy_row(src, n, n, dst);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i));
  if (i < n) _mm512_storeu_ps(dst + n - kLanes, _mm512_loadu_ps(src + n - kLanes));
}

// The two column phases of a padded row, Wq values each: evens[t] = row[2 t], odds[t] = row[2 t +
// 1], where row is x_row padded by pw zeros on the left (and zeros past its W values), split in
// registers.
QKV_AVX512_INLINE void pad_row_split(const float* x_row, int64_t W, int64_t pw, int64_t Wq,
                                     float* evens, float* odds) {
  const __m512i even_index =
      _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd_index = _mm512_add_epi32(even_index, _mm512_set1_epi32(1));
  for (int64_t t = 0; t < Wq; t += kLanes) {
    const __m512 lo = padded_vector(x_row, W, pw, 2 * t);
    const __m512 hi = padded_vector(x_row, W, pw, 2 * t + kLanes);
    const __mmask16 m = lanes_below(Wq - t);
    _mm512_mask_storeu_ps(evens + t, m, _mm512_permutex2var_ps(lo, even_index, hi));
    _mm512_mask_storeu_ps(odds + t, m, _mm512_permutex2var_ps(lo, odd_index, hi));
  }
}

// One tile of the forward: outputs [o0, o0 + OB) at positions [q0, q0 + 16 V), summed over every
// channel and tap in order, into yq's rows. Every second tap asks for one line of `ahead`.
template <int OB, int V>
QKV_AVX512_INLINE void forward_tile(const DirectConvShape& s, const float* xp, const float* wt,
                                    const float* bias, int64_t o0, int64_t q0, float* yq,
                                    PrefetchAhead& ahead) {
  __m512 acc[OB][V];
  for (int t = 0; t < OB; ++t) {
    const __m512 b = _mm512_set1_ps(bias ? bias[o0 + t] : 0.f);
    for (int v = 0; v < V; ++v) acc[t][v] = b;
  }
  const int64_t* off = s.tap_offsets.data();
  const bool asking = !ahead.empty();
  for (int64_t k = 0; k < s.K; ++k) {
    const float* xk = xp + off[k] + q0;
    __m512 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_ps(xk + kLanes * v);
    if (asking && (k & 1) == 0) ahead.ask_one();
    const float* wk = wt + k * s.O + o0;
    for (int t = 0; t < OB; ++t) {
      const __m512 w = _mm512_set1_ps(wk[t]);
      for (int v = 0; v < V; ++v) acc[t][v] = _mm512_fmadd_ps(xv[v], w, acc[t][v]);
    }
  }
  for (int t = 0; t < OB; ++t)
    for (int v = 0; v < V; ++v) _mm512_store_ps(yq + (o0 + t) * s.Qs + q0 + kLanes * v, acc[t][v]);
}

// One tile of the forward with the output channels across lanes: outputs [o0, o0 + 16 OV) at the
// P positions whose padded-plane indices are q[0, P), into yt's rows [P][O]. Each tap's weights
// are OV vector loads and its input value at each position one broadcast; the taps are added in
// order, as forward_tile adds them, so each output has forward_tile's bits.
template <int P, int OV>
QKV_AVX512_INLINE void forward_lanes_tile(const DirectConvShape& s, const float* xp,
                                          const float* wt, const float* bias, const int64_t* q,
                                          int64_t o0, float* yt) {
  __m512 acc[P][OV];
  for (int v = 0; v < OV; ++v) {
    const __m512 b = bias ? _mm512_loadu_ps(bias + o0 + kLanes * v) : _mm512_setzero_ps();
    for (int p = 0; p < P; ++p) acc[p][v] = b;
  }
  const float* at[P];
  for (int p = 0; p < P; ++p) at[p] = xp + q[p];
  const int64_t* off = s.tap_offsets.data();
  for (int64_t k = 0; k < s.K; ++k) {
    const float* wk = wt + k * s.O + o0;
    __m512 wv[OV];
    for (int v = 0; v < OV; ++v) wv[v] = _mm512_loadu_ps(wk + kLanes * v);
    const int64_t d = off[k];
    for (int p = 0; p < P; ++p) {
      const __m512 xv = _mm512_set1_ps(at[p][d]);
      for (int v = 0; v < OV; ++v) acc[p][v] = _mm512_fmadd_ps(xv, wv[v], acc[p][v]);
    }
  }
  for (int p = 0; p < P; ++p)
    for (int v = 0; v < OV; ++v) _mm512_storeu_ps(yt + p * s.O + o0 + kLanes * v, acc[p][v]);
}

// Every output channel at every output position (s.positions), P positions at a time (the rest
// one at a time), into yt [Ho * Wo][O]; each tile asks for a share of `ahead`.
template <int P, int OV>
QKV_AVX512 void forward_lanes(const DirectConvShape& s, const float* xp, const float* wt,
                              const float* bias, float* yt, PrefetchAhead& ahead) {
  const int64_t* q = s.positions.data();
  const int64_t L = int64_t(s.positions.size());
  for (int64_t o0 = 0; o0 < s.O; o0 += kLanes * OV) {
    int64_t p = 0;
    for (; p + P <= L; p += P) {
      forward_lanes_tile<P, OV>(s, xp, wt, bias, q + p, o0, yt + p * s.O);
      ahead.up_to(o0 * L + (p + P) * kLanes * OV, s.O * L);
    }
    for (; p < L; ++p) forward_lanes_tile<1, OV>(s, xp, wt, bias, q + p, o0, yt + p * s.O);
  }
}

// Every output channel at positions [q0, q0 + 16 V): blocks of 8 channels, then of 4, 2, 1 for
// the rest.
template <int V>
QKV_AVX512 void forward_positions(const DirectConvShape& s, const float* xp, const float* wt,
                                  const float* bias, int64_t q0, float* yq, PrefetchAhead& ahead) {
  int64_t o0 = 0;
  for (; o0 + 8 <= s.O; o0 += 8) forward_tile<8, V>(s, xp, wt, bias, o0, q0, yq, ahead);
  if (o0 + 4 <= s.O) forward_tile<4, V>(s, xp, wt, bias, o0, q0, yq, ahead), o0 += 4;
  if (o0 + 2 <= s.O) forward_tile<2, V>(s, xp, wt, bias, o0, q0, yq, ahead), o0 += 2;
  if (o0 < s.O) forward_tile<1, V>(s, xp, wt, bias, o0, q0, yq, ahead);
}

// One tile of the weight gradient: gw[o0 + t][k0 + u] += sum over the images and positions of
// gyq[n][o0 + t][q] * xp[n][off[k0 + u] + q].
template <int OB, int KB>
QKV_AVX512_INLINE void weight_grad_tile(const DirectConvShape& s, int64_t images, const float* xp,
                                        const float* gyq, const int64_t* off, int64_t o0,
                                        int64_t k0, float* gw) {
  __m512 acc[OB][KB];
  for (int t = 0; t < OB; ++t)
    for (int u = 0; u < KB; ++u) acc[t][u] = _mm512_setzero_ps();
  const int64_t image_floats = s.padded_floats(), gy_floats = s.O * s.Qs;
  for (int64_t n = 0; n < images; ++n) {
    const float* x = xp + n * image_floats;
    const float* g = gyq + n * gy_floats + o0 * s.Qs;
    for (int64_t q = 0; q < s.Qs; q += kLanes) {
      __m512 gv[OB];
      for (int t = 0; t < OB; ++t) gv[t] = _mm512_load_ps(g + t * s.Qs + q);
      for (int u = 0; u < KB; ++u) {
        const __m512 xv = _mm512_loadu_ps(x + off[k0 + u] + q);
        for (int t = 0; t < OB; ++t) acc[t][u] = _mm512_fmadd_ps(gv[t], xv, acc[t][u]);
      }
    }
  }
  for (int t = 0; t < OB; ++t)
    for (int u = 0; u < KB; ++u) gw[(o0 + t) * s.K + k0 + u] += _mm512_reduce_add_ps(acc[t][u]);
}

// One tile of the weight gradient with the output channels across lanes: gwt[k][o0 .. o0 + 16 OV)
// += sum over the images' output positions of xp[n][row r][q + j] * gyt[n][q][o], for the KW taps
// j of rows [r0, r0 + ROWS) (a row is one channel c and kernel row i: r = c * kh + i, k = r * KW
// + j). Each tap's input value is broadcast; the row pointers stay in registers and the taps are
// their displacements (at stride S, a row has one pointer per column phase: tap j reads phase j %
// S at displacement j / S).
template <int KW, int ROWS, int OV, int S>
QKV_AVX512_INLINE void channel_lanes_tile(const DirectConvShape& s, int64_t images, const float* xp,
                                          const float* gyt, int64_t r0, int64_t o0, float* gwt,
                                          PrefetchAhead& ahead) {
  __m512 acc[ROWS][KW][OV];
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < KW; ++j)
      for (int v = 0; v < OV; ++v) acc[r][j][v] = _mm512_setzero_ps();
  const int64_t L = s.Ho * s.Wo;
  const int64_t per_row = ahead.lines_each(images * s.Ho);
  for (int64_t n = 0; n < images; ++n) {
    const float* x = xp + n * s.padded_floats();
    const float* rows[ROWS][S];
    for (int r = 0; r < ROWS; ++r) {
      const int64_t c = (r0 + r) / s.kh, i = (r0 + r) % s.kh;
      for (int b = 0; b < S; ++b)
        rows[r][b] = x + ((c * S + i % S) * S + b) * s.plane + i / S * s.Wq;
    }
    const float* g = gyt + n * L * s.O + o0;
    for (int64_t oh = 0; oh < s.Ho; ++oh) {
      ahead.ask_lines(per_row);
      for (int64_t ow = 0; ow < s.Wo; ++ow, g += s.O) {
        const int64_t q = oh * s.Wq + ow;
        __m512 gv[OV];
        for (int v = 0; v < OV; ++v) gv[v] = _mm512_loadu_ps(g + kLanes * v);
        for (int r = 0; r < ROWS; ++r)
          for (int j = 0; j < KW; ++j) {
            const __m512 xv = _mm512_set1_ps(rows[r][j % S][q + j / S]);
            for (int v = 0; v < OV; ++v) acc[r][j][v] = _mm512_fmadd_ps(xv, gv[v], acc[r][j][v]);
          }
      }
    }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < KW; ++j)
      for (int v = 0; v < OV; ++v) {
        float* out = gwt + ((r0 + r) * KW + j) * s.O + o0 + kLanes * v;
        _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), acc[r][j][v]));
      }
}

// channel_lanes_tile for one vector of 16 output channels at stride 1, P positions of a row at a
// time: input value xp[row][q + p] serves tap j at position q + p - j, so the P positions' three
// taps (3 P FMAs a row) take P + 2 broadcasts instead of 3 P. With one vector of channels every
// broadcast feeds a single FMA; this halves the loads per FMA. Each accumulator still adds its
// positions in order, so the sums are those of channel_lanes_tile.
template <int ROWS, int P>
QKV_AVX512_INLINE void channel_lanes_tile_reusing(const DirectConvShape& s, int64_t images,
                                                  const float* xp, const float* gyt, int64_t r0,
                                                  int64_t o0, float* gwt, PrefetchAhead& ahead) {
  __m512 acc[ROWS][3];
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < 3; ++j) acc[r][j] = _mm512_setzero_ps();
  const int64_t L = s.Ho * s.Wo;
  const int64_t per_row = ahead.lines_each(images * s.Ho);
  for (int64_t n = 0; n < images; ++n) {
    const float* x = xp + n * s.padded_floats();
    const float* rows[ROWS];
    for (int r = 0; r < ROWS; ++r) rows[r] = x + (r0 + r) / s.kh * s.plane + (r0 + r) % s.kh * s.Wq;
    for (int64_t oh = 0; oh < s.Ho; ++oh) {
      ahead.ask_lines(per_row);
      const float* g = gyt + (n * L + oh * s.Wo) * s.O + o0;
      int64_t ow = 0;
      for (; ow + P <= s.Wo; ow += P) {
        const int64_t q = oh * s.Wq + ow;
        __m512 gv[P];
        for (int p = 0; p < P; ++p) gv[p] = _mm512_loadu_ps(g + (ow + p) * s.O);
        for (int r = 0; r < ROWS; ++r)
          for (int p = 0; p < P + 2; ++p) {
            const __m512 xv = _mm512_set1_ps(rows[r][q + p]);
            for (int j = 0; j < 3; ++j)
              if (p - j >= 0 && p - j < P) acc[r][j] = _mm512_fmadd_ps(xv, gv[p - j], acc[r][j]);
          }
      }
      for (; ow < s.Wo; ++ow) {
        const int64_t q = oh * s.Wq + ow;
        const __m512 gv = _mm512_loadu_ps(g + ow * s.O);
        for (int r = 0; r < ROWS; ++r)
          for (int j = 0; j < 3; ++j)
            acc[r][j] = _mm512_fmadd_ps(_mm512_set1_ps(rows[r][q + j]), gv, acc[r][j]);
      }
    }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < 3; ++j) {
      float* out = gwt + ((r0 + r) * 3 + j) * s.O + o0;
      _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), acc[r][j]));
    }
}

// Rows [r0, r0 + R) of channel_lanes_all's tiles, 16 OV channels from o0.
template <int R, int OV, int S>
QKV_AVX512_INLINE void channel_lanes_rows(const DirectConvShape& s, int64_t images, const float* xp,
                                          const float* gyt, int64_t r0, int64_t o0, float* gwt,
                                          PrefetchAhead& ahead) {
  if constexpr (OV == 1 && S == 1)
    channel_lanes_tile_reusing<R, 4>(s, images, xp, gyt, r0, o0, gwt, ahead);
  else
    channel_lanes_tile<3, R, OV, S>(s, images, xp, gyt, r0, o0, gwt, ahead);
}

// The last `left` rows from r0 (0 < left <= R) as one tile of that many.
template <int R, int OV, int S>
QKV_AVX512_INLINE void channel_lanes_rest(const DirectConvShape& s, int64_t images, const float* xp,
                                          const float* gyt, int64_t left, int64_t r0, int64_t o0,
                                          float* gwt, PrefetchAhead& ahead) {
  if constexpr (R > 0) {
    if (left == R) return channel_lanes_rows<R, OV, S>(s, images, xp, gyt, r0, o0, gwt, ahead);
    channel_lanes_rest<R - 1, OV, S>(s, images, xp, gyt, left, r0, o0, gwt, ahead);
  }
}

// Every row and output channel, ROWS rows at a time, 16 OV channels at a time. The rows left over
// (all of them for the stem's one input channel: 3) take one tile of that many, not as many tiles
// of one: a tile's 3 OV sums per row are all its FMA chains, and a pass over gy each. Each tile
// asks for its share of `ahead`, a line at a time.
template <int ROWS, int OV, int S>
QKV_AVX512 void channel_lanes_all(const DirectConvShape& s, int64_t images, const float* xp,
                                  const float* gyt, float* gwt, PrefetchAhead& ahead) {
  const int64_t rows = s.C * s.kh, row_tiles = (rows + ROWS - 1) / ROWS;
  const int64_t tiles = s.O / (kLanes * OV) * row_tiles;
  int64_t tile = 0;
  for (int64_t o0 = 0; o0 < s.O; o0 += kLanes * OV) {
    int64_t r0 = 0;
    for (; r0 + ROWS <= rows; r0 += ROWS) {
      ahead.pace(++tile, tiles);
      channel_lanes_rows<ROWS, OV, S>(s, images, xp, gyt, r0, o0, gwt, ahead);
    }
    if (r0 < rows) {
      ahead.pace(++tile, tiles);
      channel_lanes_rest<ROWS - 1, OV, S>(s, images, xp, gyt, rows - r0, r0, o0, gwt, ahead);
    }
  }
}

template <int S>
QKV_AVX512 void channel_lanes_at_stride(const DirectConvShape& s, int64_t images, const float* xp,
                                        const float* gyt, float* gwt, PrefetchAhead& ahead) {
  if (s.O % (4 * kLanes) == 0) return channel_lanes_all<2, 4, S>(s, images, xp, gyt, gwt, ahead);
  if (s.O % (2 * kLanes) == 0) return channel_lanes_all<4, 2, S>(s, images, xp, gyt, gwt, ahead);
  channel_lanes_all<8, 1, S>(s, images, xp, gyt, gwt, ahead);
}

}  // namespace

DirectConvShape::DirectConvShape(int64_t C_, int64_t H_, int64_t W_, int64_t O_, int64_t kh_,
                                 int64_t kw_, int64_t ph_, int64_t pw_, int64_t stride_)
    : C(C_), H(H_), W(W_), O(O_), kh(kh_), kw(kw_), ph(ph_), pw(pw_), stride(stride_) {
  Hp = H + 2 * ph;
  Wp = W + 2 * pw;
  Ho = (Hp - kh) / stride + 1;
  Wo = (Wp - kw) / stride + 1;
  Hq = (Hp + stride - 1) / stride;
  Wq = (Wp + stride - 1) / stride;
  plane = Hq * Wq;
  Q = Ho * Wq;
  Qs = (Q + kLanes - 1) / kLanes * kLanes;
  K = C * kh * kw;
  tap_offsets.resize(size_t(K));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j)
        tap_offsets[size_t((c * kh + i) * kw + j)] =
            ((c * stride + i % stride) * stride + j % stride) * plane + i / stride * Wq +
            j / stride;
  positions.resize(size_t(Ho * Wo));
  for (int64_t oh = 0; oh < Ho; ++oh)
    for (int64_t ow = 0; ow < Wo; ++ow) positions[size_t(oh * Wo + ow)] = oh * Wq + ow;
}

bool direct_conv_enabled() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has && turned_on.load(std::memory_order_relaxed);
}

void set_direct_conv_enabled(bool on) { turned_on.store(on, std::memory_order_relaxed); }

namespace {
std::atomic<bool> forward_lanes_on{true};
}  // namespace

void set_direct_conv_forward_lanes_enabled(bool on) {
  forward_lanes_on.store(on, std::memory_order_relaxed);
}

bool DirectConvShape::forward_in_channel_lanes() const {
  return O % (2 * kLanes) == 0 && 10 * Ho * Wo < 9 * Qs &&
         forward_lanes_on.load(std::memory_order_relaxed);
}

QKV_AVX512 void direct_conv_pad(const DirectConvShape& s, const float* x, float* xp) {
  if (s.stride == 1) {
    // zeros, then the rows
    std::fill(xp, xp + s.C * s.plane, 0.f);
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t h = 0; h < s.H; ++h)
        copy_values(x + (c * s.H + h) * s.W, s.W, xp + c * s.plane + (s.ph + h) * s.Wp + s.pw);
  } else {
    // stride 2: padded row hp goes to phases (hp % 2, 0) and (hp % 2, 1), row hp / 2, its two
    // vectors masked loads straight from the input row (zero outside it), split in registers
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t hp = 0; hp < 2 * s.Hq; ++hp) {
        const int64_t h = hp - s.ph;
        const bool inside = h >= 0 && h < s.H;
        const float* x_row = x + (c * s.H + (inside ? h : 0)) * s.W;
        float* evens = xp + ((c * 2 + hp % 2) * 2) * s.plane + hp / 2 * s.Wq;
        pad_row_split(x_row, inside ? s.W : 0, s.pw, s.Wq, evens, evens + s.plane);
      }
  }
  const int64_t planes = s.C * s.stride * s.stride * s.plane;
  std::fill(xp + planes, xp + s.padded_floats(), 0.f);
}

namespace {

// Fewer than 4 output channels at positions [q0, q0 + 16 V): tiles of 2 channels, then 1.
template <int V>
QKV_AVX512 void narrow_positions(const DirectConvShape& s, const float* xp, const float* wt,
                                 const float* bias, int64_t q0, float* yq, PrefetchAhead& ahead) {
  int64_t o0 = 0;
  if (o0 + 2 <= s.O) forward_tile<2, V>(s, xp, wt, bias, o0, q0, yq, ahead), o0 += 2;
  if (o0 < s.O) forward_tile<1, V>(s, xp, wt, bias, o0, q0, yq, ahead);
}

// yq [O, Qs]: the output at every position of Ho rows of Wq columns; each tile of 3 vectors asks
// for a share of `ahead`.
QKV_AVX512 void forward_rows(const DirectConvShape& s, const float* xp, const float* wt,
                             const float* bias, float* yq, PrefetchAhead& ahead) {
  // tiles of 3 vectors, and the last 4, 2 or 1 as tiles of 2 and 1 (a tile of 1 is half as fast:
  // 8 broadcasts and a load for 8 FMAs)
  const int64_t vectors = s.Qs / kLanes;
  int64_t v = 0;
  // With one or two output channels (CBAM's 7 x 7 spatial convolution, 2 -> 1, and its gx by the
  // flipped kernel, 1 -> 2) a tile of 3 vectors holds 3 or 6 sums, each FMA waiting for the one
  // before it: 8 vectors keep 8 or 16 chains in flight. The sums are the same either way.
  if (s.O < 4)
    for (; vectors - v >= 8; v += 8) narrow_positions<8>(s, xp, wt, bias, v * kLanes, yq, ahead);
  for (; vectors - v >= 3 && vectors - v != 4; v += 3) {
    forward_positions<3>(s, xp, wt, bias, v * kLanes, yq, ahead);
    ahead.up_to(v + 3, vectors);  // what the taps' one line at a time has not yet asked for
  }
  for (; vectors - v >= 2; v += 2) forward_positions<2>(s, xp, wt, bias, v * kLanes, yq, ahead);
  if (v < vectors) forward_positions<1>(s, xp, wt, bias, v * kLanes, yq, ahead);
}

// dst[0, n) = interleave(even, odd): dst[2 k] = even[k], dst[2 k + 1] = odd[k], reading even[k]
// only for k < n_even and odd[k] for k < n_odd (zero past them).
QKV_AVX512 void interleave_row(const float* even, int64_t n_even, const float* odd, int64_t n_odd,
                               int64_t n, float* dst) {
  const __m512i lo_index = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi_index = _mm512_add_epi32(lo_index, _mm512_set1_epi32(8));
  for (int64_t k = 0; 2 * k < n; k += kLanes) {
    const __m512 e = _mm512_maskz_loadu_ps(lanes_below(n_even - k), even + k);
    const __m512 o = _mm512_maskz_loadu_ps(lanes_below(n_odd - k), odd + k);
    _mm512_mask_storeu_ps(dst + 2 * k, lanes_below(n - 2 * k),
                          _mm512_permutex2var_ps(e, lo_index, o));
    _mm512_mask_storeu_ps(dst + 2 * k + kLanes, lanes_below(n - 2 * k - kLanes),
                          _mm512_permutex2var_ps(e, hi_index, o));
  }
}

}  // namespace

namespace {
// y [O][Ho * Wo] by forward_lanes (forward_in_channel_lanes), through yt [Ho * Wo][O].
QKV_AVX512 void forward_in_lanes(const DirectConvShape& s, const float* xp, const float* wt,
                                 const float* bias, float* yt, float* y, PrefetchAhead& ahead) {
  if (s.O % (4 * kLanes) == 0)
    forward_lanes<6, 4>(s, xp, wt, bias, yt, ahead);
  else
    forward_lanes<7, 2>(s, xp, wt, bias, yt, ahead);
  const int64_t L = int64_t(s.positions.size());
  pack_transposed_avx512(yt, s.O, L, s.O, int(L), y);
}
}  // namespace

QKV_AVX512 void direct_conv_forward(const DirectConvShape& s, const float* xp, const float* wt,
                                    const float* bias, float* yq, float* y, PrefetchAhead ahead) {
  // yq holds yt (Ho * Wo * O <= Qs * O floats)
  if (s.forward_in_channel_lanes()) return forward_in_lanes(s, xp, wt, bias, yq, y, ahead);
  forward_rows(s, xp, wt, bias, yq, ahead);
  for (int64_t o = 0; o < s.O; ++o)
    for (int64_t oh = 0; oh < s.Ho; ++oh)
      copy_row(yq + o * s.Qs + oh * s.Wq, s.Wo, s.Wo, y + (o * s.Ho + oh) * s.Wo);
}

QKV_AVX512 void direct_conv_gy_rows(const DirectConvShape& s, const float* gy, float* gyq) {
  for (int64_t o = 0; o < s.O; ++o) {
    float* row = gyq + o * s.Qs;
    for (int64_t oh = 0; oh < s.Ho; ++oh)
      copy_row(gy + (o * s.Ho + oh) * s.Wo, s.Wo, s.Wq, row + oh * s.Wq);
    std::fill(row + s.Q, row + s.Qs, 0.f);
  }
}

void direct_conv_gy_transposed(const DirectConvShape& s, const float* gy, float* gyt) {
  const int64_t L = s.Ho * s.Wo;
  pack_transposed_avx512(gy, L, s.O, L, int(s.O), gyt);
}

QKV_AVX512 void direct_conv_weight_grad_in_channel_lanes(const DirectConvShape& s, int64_t images,
                                                         const float* xp, const float* gyt,
                                                         float* gwt, PrefetchAhead ahead) {
  if (s.stride == 2) return channel_lanes_at_stride<2>(s, images, xp, gyt, gwt, ahead);
  channel_lanes_at_stride<1>(s, images, xp, gyt, gwt, ahead);
}

QKV_AVX512 void direct_conv_weight_grad(const DirectConvShape& s, int64_t images, const float* xp,
                                        const float* gyq, float* gw) {
  const int64_t* off = s.tap_offsets.data();
  for_each_weight_grad_tile(s.O, s.K, [&]<int OB, int KB>(int64_t o0, int64_t k0) QKV_AVX512 {
    weight_grad_tile<OB, KB>(s, images, xp, gyq, off, o0, k0, gw);
  });
}

}  // namespace qkv::cpu

namespace qkv::cpu {

namespace {
// The rows (or columns) of one parity of a padded axis that land inside the input: for the n
// input rows after `pad` rows of padding, those of padded parity a are phase rows [first, first +
// count), limited to the `available` rows the phase's convolution gives.
struct PhaseRange {
  int64_t first, count;
};
PhaseRange inside_rows(int64_t a, int64_t pad, int64_t n, int64_t available) {
  const int64_t h0 = ((a - pad) % 2 + 2) % 2;  // the first input row of padded parity a
  const int64_t first = (h0 + pad) / 2;
  const int64_t wanted = h0 < n ? (n - h0 + 1) / 2 : 0;
  return {first, std::clamp<int64_t>(std::min(wanted, available - first), 0, wanted)};
}
}  // namespace

DirectConvInputGrad::DirectConvInputGrad(const DirectConvShape& s, const float* w)
    : s_(s),
      gy_shape_(s.O, s.Ho, s.Wo, s.C, (s.kh + 1) / 2, (s.kw + 1) / 2, (s.kh + 1) / 2 - 1,
                (s.kw + 1) / 2 - 1, 1) {
  const int64_t Mmax = gy_shape_.kh, Nmax = gy_shape_.kw;
  // the channels across lanes where the untrimmed phases would (gy_shape_ has their O, Ho, Wo)
  lanes_ = gy_shape_.forward_in_channel_lanes();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t Ma = (s.kh - a + 1) / 2, Nb = (s.kw - b + 1) / 2;  // taps a, a + 2, ...
      const PhaseRange rows = inside_rows(a, s.ph, s.H, gy_shape_.Ho);
      const PhaseRange cols = inside_rows(b, s.pw, s.W, gy_shape_.Wo);
      DirectConvShape p = gy_shape_;
      p.kh = Ma, p.kw = Nb, p.K = s.O * Ma * Nb;
      p.tap_offsets.assign(size_t(p.K), 0);
      std::vector<float> wt(size_t(p.K * s.C));
      for (int64_t o = 0; o < s.O; ++o)
        for (int64_t m = 0; m < Ma; ++m)  // flipped: tap m of the sub-kernel is row a + 2 (Ma-1-m)
          for (int64_t n = 0; n < Nb; ++n) {
            const int64_t k = (o * Ma + m) * Nb + n;
            // a smaller sub-kernel reads the shared padding one row (column) further in; every
            // phase reads from its first row inside gx on
            p.tap_offsets[size_t(k)] =
                o * p.plane + (rows.first + m + Mmax - Ma) * p.Wq + (n + Nmax - Nb);
            const int64_t i = a + 2 * (Ma - 1 - m), j = b + 2 * (Nb - 1 - n);
            for (int64_t c = 0; c < s.C; ++c)
              wt[size_t(k * s.C + c)] = w[((o * s.C + c) * s.kh + i) * s.kw + j];
          }
      p.Ho = rows.count;
      p.Q = p.Ho * p.Wq;
      p.Qs = (p.Q + kLanes - 1) / kLanes * kLanes;
      p.Wo = cols.count;
      p.positions.clear();
      for (int64_t r = 0; r < rows.count; ++r)
        for (int64_t t = 0; t < cols.count; ++t) p.positions.push_back(r * p.Wq + cols.first + t);
      phases_.push_back(
          Phase{std::move(p), std::move(wt), rows.first, rows.count, cols.first, cols.count});
    }
}

namespace {
// The phases' outputs start after the padded gy, on a 64-byte boundary (aligned stores).
int64_t aligned_floats(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }
}  // namespace

int64_t DirectConvInputGrad::scratch_floats() const {
  // the padded gy, the four phases' outputs, and yt for the lanes
  return aligned_floats(gy_shape_.padded_floats()) + 4 * s_.C * gy_shape_.Qs + s_.C * gy_shape_.Qs;
}

QKV_AVX512 void DirectConvInputGrad::run(const float* gy, float* gx, float* scratch) const {
  float* gyp = scratch;
  float* out = scratch + aligned_floats(gy_shape_.padded_floats());  // four phases' outputs
  float* yt = out + 4 * s_.C * gy_shape_.Qs;
  direct_conv_pad(gy_shape_, gy, gyp);
  // phase p's output in its slot of C * gy_shape_.Qs floats, channel by channel: its rows of Wq
  // columns (Qs a channel), or with the channels across lanes its rows of `cols` positions
  auto slot = [&](int64_t p) { return out + p * s_.C * gy_shape_.Qs; };
  auto channel_floats = [&](const Phase& p) { return lanes_ ? p.rows * p.cols : p.shape.Qs; };
  auto row_floats = [&](const Phase& p) { return lanes_ ? p.cols : p.shape.Wq; };
  auto first_col = [&](const Phase& p) { return lanes_ ? 0 : p.first_col; };
  PrefetchAhead nothing;
  for (size_t p = 0; p < 4; ++p) {
    const Phase& phase = phases_[p];
    if (phase.rows == 0 || phase.cols == 0) continue;  // interleave reads none of it
    if (lanes_)
      forward_in_lanes(phase.shape, gyp, phase.weights.data(), nullptr, yt, slot(int64_t(p)),
                       nothing);
    else
      forward_rows(phase.shape, gyp, phase.weights.data(), nullptr, slot(int64_t(p)), nothing);
  }
  // gx[c][h][w] is phase ((h + ph) % 2, (w + pw) % 2) at row (h + ph) / 2, column (w + pw) / 2;
  // the phases' ranges start at w = 0 (even) and w = 1 (odd), and a row or column past what a
  // phase gives gets nothing
  const int64_t b0 = s_.pw % 2, b1 = (1 + s_.pw) % 2;
  for (int64_t c = 0; c < s_.C; ++c)
    for (int64_t h = 0; h < s_.H; ++h) {
      const int64_t a = (h + s_.ph) % 2, r = (h + s_.ph) / 2;
      const Phase& even = phases_[size_t(a * 2 + b0)];
      const Phase& odd = phases_[size_t(a * 2 + b1)];
      float* row = gx + (c * s_.H + h) * s_.W;
      const int64_t i = r - even.first_row;  // odd's first row is even's: the same parity a
      if (i >= even.rows) {
        std::fill(row, row + s_.W, 0.f);
        continue;
      }
      auto at = [&](const Phase& p, int64_t b) {
        return slot(a * 2 + b) + c * channel_floats(p) + i * row_floats(p) + first_col(p);
      };
      interleave_row(at(even, b0), even.cols, at(odd, b1), odd.cols, s_.W, row);
    }
}

}  // namespace qkv::cpu
