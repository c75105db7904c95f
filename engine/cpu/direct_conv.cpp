// The direct convolution (see direct_conv.h): register tiles over padded planes.
//
// The functions carry target("avx512f") instead of relying on -march: this file is compiled into
// every build and only called after cpuid says the CPU has AVX-512F.
#include "engine/cpu/direct_conv.h"

#include <immintrin.h>

#include "engine/cpu/gemm_pack.h"

// GCC 12's _mm512_reduce_add_ps passes a self-initialized "undefined" vector as an unused operand,
// which -Wmaybe-uninitialized reports wherever it is inlined (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)  // a GCC-only warning; clang would warn about the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#define QKV_AVX512 __attribute__((target("avx512f")))
#define QKV_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline

namespace qkv::cpu {

namespace {

std::atomic<bool> turned_on{true};

constexpr int64_t kLanes = 16;

// One tile of the forward: outputs [o0, o0 + OB) at positions [q0, q0 + 16 V), summed over every
// channel and tap in order, into yq's rows.
template <int OB, int V>
QKV_AVX512_INLINE void forward_tile(const DirectConvShape& s, const float* xp, const float* wt,
                                    const float* bias, int64_t o0, int64_t q0, float* yq) {
  __m512 acc[OB][V];
  for (int t = 0; t < OB; ++t) {
    const __m512 b = _mm512_set1_ps(bias ? bias[o0 + t] : 0.f);
    for (int v = 0; v < V; ++v) acc[t][v] = b;
  }
  for (int64_t c = 0; c < s.C; ++c) {
    const float* xc = xp + c * s.plane + q0;
    const float* wc = wt + c * s.kh * s.kw * s.O + o0;
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        const float* xk = xc + i * s.Wp + j;
        __m512 xv[V];
        for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_ps(xk + kLanes * v);
        const float* wk = wc + (i * s.kw + j) * s.O;
        for (int t = 0; t < OB; ++t) {
          const __m512 w = _mm512_set1_ps(wk[t]);
          for (int v = 0; v < V; ++v) acc[t][v] = _mm512_fmadd_ps(xv[v], w, acc[t][v]);
        }
      }
  }
  for (int t = 0; t < OB; ++t)
    for (int v = 0; v < V; ++v) _mm512_store_ps(yq + (o0 + t) * s.Qs + q0 + kLanes * v, acc[t][v]);
}

// Every output channel at positions [q0, q0 + 16 V): blocks of 8 channels, then of 4, 2, 1 for
// the rest.
template <int V>
QKV_AVX512 void forward_positions(const DirectConvShape& s, const float* xp, const float* wt,
                                  const float* bias, int64_t q0, float* yq) {
  int64_t o0 = 0;
  for (; o0 + 8 <= s.O; o0 += 8) forward_tile<8, V>(s, xp, wt, bias, o0, q0, yq);
  if (o0 + 4 <= s.O) forward_tile<4, V>(s, xp, wt, bias, o0, q0, yq), o0 += 4;
  if (o0 + 2 <= s.O) forward_tile<2, V>(s, xp, wt, bias, o0, q0, yq), o0 += 2;
  if (o0 < s.O) forward_tile<1, V>(s, xp, wt, bias, o0, q0, yq);
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

// Taps [k0, K) of output channels [o0, o0 + OB): blocks of 6 taps, then the rest as one block.
template <int OB>
QKV_AVX512 void weight_grad_rows(const DirectConvShape& s, int64_t images, const float* xp,
                                 const float* gyq, const int64_t* off, int64_t o0, float* gw) {
  int64_t k0 = 0;
  for (; k0 + 6 <= s.K; k0 += 6) weight_grad_tile<OB, 6>(s, images, xp, gyq, off, o0, k0, gw);
  switch (s.K - k0) {
    case 5:
      return weight_grad_tile<OB, 5>(s, images, xp, gyq, off, o0, k0, gw);
    case 4:
      return weight_grad_tile<OB, 4>(s, images, xp, gyq, off, o0, k0, gw);
    case 3:
      return weight_grad_tile<OB, 3>(s, images, xp, gyq, off, o0, k0, gw);
    case 2:
      return weight_grad_tile<OB, 2>(s, images, xp, gyq, off, o0, k0, gw);
    case 1:
      return weight_grad_tile<OB, 1>(s, images, xp, gyq, off, o0, k0, gw);
    default:
      return;
  }
}

// One tile of the weight gradient with the output channels across lanes: gwt[k][o0 .. o0 + 16 OV)
// += sum over the images' output positions of xp[n][row r][q + j] * gyt[n][q][o], for the KW taps
// j of rows [r0, r0 + ROWS) (a row is one channel c and kernel row i: r = c * kh + i, k = r * KW
// + j). Each tap's input value is broadcast; the row pointers stay in registers and the taps are
// their displacements.
template <int KW, int ROWS, int OV>
QKV_AVX512_INLINE void channel_lanes_tile(const DirectConvShape& s, int64_t images, const float* xp,
                                          const float* gyt, int64_t r0, int64_t o0, float* gwt) {
  __m512 acc[ROWS][KW][OV];
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < KW; ++j)
      for (int v = 0; v < OV; ++v) acc[r][j][v] = _mm512_setzero_ps();
  const int64_t L = s.Ho * s.Wo;
  for (int64_t n = 0; n < images; ++n) {
    const float* x = xp + n * s.padded_floats();
    const float* rows[ROWS];
    for (int r = 0; r < ROWS; ++r) rows[r] = x + (r0 + r) / s.kh * s.plane + (r0 + r) % s.kh * s.Wp;
    const float* g = gyt + n * L * s.O + o0;
    for (int64_t oh = 0; oh < s.Ho; ++oh)
      for (int64_t ow = 0; ow < s.Wo; ++ow, g += s.O) {
        const int64_t q = oh * s.Wp + ow;
        __m512 gv[OV];
        for (int v = 0; v < OV; ++v) gv[v] = _mm512_loadu_ps(g + kLanes * v);
        for (int r = 0; r < ROWS; ++r)
          for (int j = 0; j < KW; ++j) {
            const __m512 xv = _mm512_set1_ps(rows[r][q + j]);
            for (int v = 0; v < OV; ++v) acc[r][j][v] = _mm512_fmadd_ps(xv, gv[v], acc[r][j][v]);
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

// Every row and output channel, ROWS rows at a time (the last tile with fewer), 16 OV channels
// at a time.
template <int ROWS, int OV>
QKV_AVX512 void channel_lanes_all(const DirectConvShape& s, int64_t images, const float* xp,
                                  const float* gyt, float* gwt) {
  const int64_t rows = s.C * s.kh;
  for (int64_t o0 = 0; o0 < s.O; o0 += kLanes * OV) {
    int64_t r0 = 0;
    for (; r0 + ROWS <= rows; r0 += ROWS)
      channel_lanes_tile<3, ROWS, OV>(s, images, xp, gyt, r0, o0, gwt);
    for (; r0 < rows; ++r0) channel_lanes_tile<3, 1, OV>(s, images, xp, gyt, r0, o0, gwt);
  }
}

}  // namespace

DirectConvShape::DirectConvShape(int64_t C_, int64_t H_, int64_t W_, int64_t O_, int64_t kh_,
                                 int64_t kw_, int64_t ph_, int64_t pw_)
    : C(C_), H(H_), W(W_), O(O_), kh(kh_), kw(kw_), ph(ph_), pw(pw_) {
  Hp = H + 2 * ph;
  Wp = W + 2 * pw;
  Ho = Hp - kh + 1;
  Wo = Wp - kw + 1;
  plane = Hp * Wp;
  Q = Ho * Wp;
  Qs = (Q + kLanes - 1) / kLanes * kLanes;
  K = C * kh * kw;
}

bool direct_conv_enabled() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has && turned_on.load(std::memory_order_relaxed);
}

void set_direct_conv_enabled(bool on) { turned_on.store(on, std::memory_order_relaxed); }

void direct_conv_pad(const DirectConvShape& s, const float* x, float* xp) {
  for (int64_t c = 0; c < s.C; ++c) {
    float* p = xp + c * s.plane;
    const float* xc = x + c * s.H * s.W;
    std::fill(p, p + s.ph * s.Wp, 0.f);
    for (int64_t h = 0; h < s.H; ++h) {
      float* row = p + (s.ph + h) * s.Wp;
      std::fill(row, row + s.pw, 0.f);
      std::memcpy(row + s.pw, xc + h * s.W, sizeof(float) * size_t(s.W));
      std::fill(row + s.pw + s.W, row + s.Wp, 0.f);
    }
    std::fill(p + (s.ph + s.H) * s.Wp, p + s.plane, 0.f);
  }
  std::fill(xp + s.C * s.plane, xp + s.padded_floats(), 0.f);
}

QKV_AVX512 void direct_conv_forward(const DirectConvShape& s, const float* xp, const float* wt,
                                    const float* bias, float* yq, float* y) {
  constexpr int V = 3;
  const int64_t vectors = s.Qs / kLanes;
  int64_t v = 0;
  for (; v + V <= vectors; v += V) forward_positions<V>(s, xp, wt, bias, v * kLanes, yq);
  for (; v < vectors; ++v) forward_positions<1>(s, xp, wt, bias, v * kLanes, yq);
  for (int64_t o = 0; o < s.O; ++o)
    for (int64_t oh = 0; oh < s.Ho; ++oh)
      std::memcpy(y + (o * s.Ho + oh) * s.Wo, yq + o * s.Qs + oh * s.Wp,
                  sizeof(float) * size_t(s.Wo));
}

void direct_conv_gy_rows(const DirectConvShape& s, const float* gy, float* gyq) {
  for (int64_t o = 0; o < s.O; ++o) {
    float* row = gyq + o * s.Qs;
    for (int64_t oh = 0; oh < s.Ho; ++oh) {
      std::memcpy(row + oh * s.Wp, gy + (o * s.Ho + oh) * s.Wo, sizeof(float) * size_t(s.Wo));
      std::fill(row + oh * s.Wp + s.Wo, row + (oh + 1) * s.Wp, 0.f);
    }
    std::fill(row + s.Q, row + s.Qs, 0.f);
  }
}

bool DirectConvShape::weight_grad_in_channel_lanes() const { return kw == 3 && O % kLanes == 0; }

void direct_conv_gy_transposed(const DirectConvShape& s, const float* gy, float* gyt) {
  const int64_t L = s.Ho * s.Wo;
  pack_transposed_avx512(gy, L, s.O, L, int(s.O), gyt);
}

QKV_AVX512 void direct_conv_weight_grad_in_channel_lanes(const DirectConvShape& s, int64_t images,
                                                         const float* xp, const float* gyt,
                                                         float* gwt) {
  if (s.O % (4 * kLanes) == 0) return channel_lanes_all<2, 4>(s, images, xp, gyt, gwt);
  if (s.O % (2 * kLanes) == 0) return channel_lanes_all<4, 2>(s, images, xp, gyt, gwt);
  channel_lanes_all<8, 1>(s, images, xp, gyt, gwt);
}

QKV_AVX512 void direct_conv_weight_grad(const DirectConvShape& s, int64_t images, const float* xp,
                                        const float* gyq, float* gw) {
  std::vector<int64_t> off(size_t(s.K));
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j)
        off[size_t((c * s.kh + i) * s.kw + j)] = c * s.plane + i * s.Wp + j;
  int64_t o0 = 0;
  for (; o0 + 4 <= s.O; o0 += 4) weight_grad_rows<4>(s, images, xp, gyq, off.data(), o0, gw);
  if (o0 + 2 <= s.O) weight_grad_rows<2>(s, images, xp, gyq, off.data(), o0, gw), o0 += 2;
  if (o0 < s.O) weight_grad_rows<1>(s, images, xp, gyq, off.data(), o0, gw);
}

}  // namespace qkv::cpu
