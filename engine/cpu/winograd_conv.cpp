// F(2x2, 3x3) Winograd convolution (see winograd_conv.h).
//
// The functions carry target("avx512f") instead of relying on -march: this file is compiled into
// every build and only called after cpuid says the CPU has AVX-512F.
#include "engine/cpu/winograd_conv.h"

#include <immintrin.h>

#include <atomic>

#include "engine/cpu/avx512_target.h"

namespace qkv::cpu {

namespace {

std::atomic<WinogradUse> in_use{WinogradUse::where_faster};

constexpr int64_t kLanes = 16;

// The four column phases of one row of tiles: lane t of phase j is element 2 t + j of the 32 in
// (lo, hi), the row's values from column -1 on.
QKV_AVX512_INLINE void column_phases(__m512 lo, __m512 hi, __m512 phase[4]) {
  const __m512i first = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int j = 0; j < 4; ++j)
    phase[j] = _mm512_permutex2var_ps(lo, _mm512_add_epi32(first, _mm512_set1_epi32(j)), hi);
}

// B^T applied along four vectors: (d0 - d2, d1 + d2, d2 - d1, d1 - d3).
QKV_AVX512_INLINE void input_transform(const __m512 d[4], __m512 out[4]) {
  out[0] = _mm512_sub_ps(d[0], d[2]);
  out[1] = _mm512_add_ps(d[1], d[2]);
  out[2] = _mm512_sub_ps(d[2], d[1]);
  out[3] = _mm512_sub_ps(d[1], d[3]);
}

// V [16, C, Ts] of one image: element (i, k) of each tile's B^T d B, the tiles across the lanes,
// an image row of tiles (tw of them) at a time; lanes [T, Ts) zero.
QKV_AVX512 void transform_input(const WinogradShape& s, const float* x, float* v) {
  const int64_t C = s.C, H = s.H, W = s.W, tw = s.tw, Ts = s.Ts, plane = s.v_plane;
  const __mmask16 lo_mask = lanes_between(1, W + 1);  // columns -1 .. 14: those inside the row
  const __mmask16 hi_mask = lanes_below(W - 15);      // columns 15 .. 30
  const __mmask16 tiles = lanes_below(tw);
  for (int64_t c = 0; c < C; ++c) {
    float* vc = v + c * Ts;
    for (int64_t rt = 0; rt < s.images * s.th; ++rt) {  // the group's rows of tiles
      const int64_t ty = rt % s.th;
      const float* xc = x + ((rt / s.th) * C + c) * H * W;
      __m512 lo[4], hi[4];  // the tile row's four input rows, 2 ty - 1 .. 2 ty + 2
      for (int r = 0; r < 4; ++r) {
        const int64_t row = 2 * ty + r - 1;
        const bool inside = row >= 0 && row < H;
        lo[r] = _mm512_maskz_loadu_ps(inside ? lo_mask : 0, xc + row * W - 1);
        hi[r] = _mm512_maskz_loadu_ps(inside ? hi_mask : 0, xc + row * W + 15);
      }
      __m512 rows_lo[4], rows_hi[4];  // B^T d: along the rows
      input_transform(lo, rows_lo);
      input_transform(hi, rows_hi);
      for (int i = 0; i < 4; ++i) {
        __m512 phase[4], out[4];
        column_phases(rows_lo[i], rows_hi[i], phase);
        input_transform(phase, out);  // (B^T d) B: along the columns
        for (int k = 0; k < 4; ++k)
          _mm512_mask_storeu_ps(vc + (i * 4 + k) * plane + rt * tw, tiles, out[k]);
      }
    }
    if (s.T < Ts)  // the last vector's lanes past the tiles, which the products read
      for (int xi = 0; xi < 16; ++xi)
        _mm512_mask_storeu_ps(vc + xi * plane + Ts - kLanes,
                              __mmask16(~lanes_below(s.T - Ts + kLanes)), _mm512_setzero_ps());
  }
}

// M [O, Ts] of one element xi: outputs [o0, o0 + OB) at tiles [t0, t0 + 16 NV), from u [C, O]
// and v [C, Ts], the channels added in order.
template <int OB, int NV>
QKV_AVX512_INLINE void product_tile(const WinogradShape& s, const float* u, const float* v,
                                    int64_t o0, int64_t t0, float* m, PrefetchAhead& ahead) {
  __m512 acc[OB][NV];
  for (int t = 0; t < OB; ++t)
    for (int n = 0; n < NV; ++n) acc[t][n] = _mm512_setzero_ps();
  const float* vt = v + t0;
  const float* uo = u + o0;
  const bool asking = !ahead.empty();
  for (int64_t c = 0; c < s.C; ++c, vt += s.Ts, uo += s.O) {
    __m512 tv[NV];
    for (int n = 0; n < NV; ++n) tv[n] = _mm512_loadu_ps(vt + kLanes * n);
    if (asking) ahead.ask_one();
    for (int t = 0; t < OB; ++t) {
      const __m512 w = _mm512_set1_ps(uo[t]);
      for (int n = 0; n < NV; ++n) acc[t][n] = _mm512_fmadd_ps(tv[n], w, acc[t][n]);
    }
  }
  for (int t = 0; t < OB; ++t)
    for (int n = 0; n < NV; ++n) _mm512_storeu_ps(m + (o0 + t) * s.Ts + t0 + kLanes * n, acc[t][n]);
}

// All outputs at tiles [t0, t0 + 16 NV): 8 output channels a tile, then 4, 2, 1.
template <int NV>
QKV_AVX512_INLINE void product_column(const WinogradShape& s, const float* u, const float* v,
                                      int64_t t0, float* m, PrefetchAhead& ahead) {
  int64_t o0 = 0;
  for (; o0 + 8 <= s.O; o0 += 8) product_tile<8, NV>(s, u, v, o0, t0, m, ahead);
  if (o0 + 4 <= s.O) product_tile<4, NV>(s, u, v, o0, t0, m, ahead), o0 += 4;
  if (o0 + 2 <= s.O) product_tile<2, NV>(s, u, v, o0, t0, m, ahead), o0 += 2;
  if (o0 < s.O) product_tile<1, NV>(s, u, v, o0, t0, m, ahead);
}

// M[xi] = U[xi] @ V[xi] for the 16 elements xi.
QKV_AVX512 void products(const WinogradShape& s, const float* u, const float* v, float* m,
                         PrefetchAhead& ahead) {
  const int64_t vectors = s.Ts / kLanes;
  for (int xi = 0; xi < 16; ++xi) {
    const float* uxi = u + xi * s.C * s.O;
    const float* vxi = v + xi * s.v_plane;
    float* mxi = m + xi * s.m_plane;
    int64_t n = 0;
    for (; n + 3 <= vectors; n += 3) product_column<3>(s, uxi, vxi, kLanes * n, mxi, ahead);
    if (n + 2 <= vectors) product_column<2>(s, uxi, vxi, kLanes * n, mxi, ahead), n += 2;
    if (n < vectors) product_column<1>(s, uxi, vxi, kLanes * n, mxi, ahead);
  }
}

// y [O, H, W] = A^T M A (+ bias) of each tile, an image row of tiles at a time: its two output
// rows, each the tiles' two columns interleaved.
QKV_AVX512 void transform_output(const WinogradShape& s, const float* m, const float* bias,
                                 float* y) {
  const int64_t H = s.H, W = s.W, tw = s.tw, Ts = s.Ts, plane = s.m_plane;
  const __mmask16 tiles = lanes_below(tw);
  // output column 2 t + b from lane t of y_b: (y0, y1) lanes 0..7 interleaved, then 8..15
  const __m512i low = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
  for (int64_t o = 0; o < s.O; ++o) {
    const __m512 b = _mm512_set1_ps(bias ? bias[o] : 0.f);
    const float* mo = m + o * Ts;
    for (int64_t rt = 0; rt < s.images * s.th; ++rt) {  // the group's rows of tiles
      const int64_t ty = rt % s.th;
      float* yo = y + ((rt / s.th) * s.O + o) * H * W;
      __m512 mt[16];
      for (int xi = 0; xi < 16; ++xi)
        mt[xi] = _mm512_maskz_loadu_ps(tiles, mo + xi * plane + rt * tw);
      __m512 r[2][4];  // A^T M: along the rows
      for (int k = 0; k < 4; ++k) {
        r[0][k] = _mm512_add_ps(_mm512_add_ps(mt[k], mt[4 + k]), mt[8 + k]);
        r[1][k] = _mm512_sub_ps(_mm512_sub_ps(mt[4 + k], mt[8 + k]), mt[12 + k]);
      }
      for (int a = 0; a < 2 && 2 * ty + a < H; ++a) {  // (A^T M) A: along the columns
        const __m512 y0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r[a][0], r[a][1]), r[a][2]), b);
        const __m512 y1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(r[a][1], r[a][2]), r[a][3]), b);
        float* row = yo + (2 * ty + a) * W;
        _mm512_mask_storeu_ps(row, lanes_below(W), _mm512_permutex2var_ps(y0, low, y1));
        if (W > kLanes)
          _mm512_mask_storeu_ps(row + kLanes, lanes_below(W - kLanes),
                                _mm512_permutex2var_ps(y0, high, y1));
      }
    }
  }
}

}  // namespace

WinogradShape::WinogradShape(int64_t C_, int64_t H_, int64_t W_, int64_t O_, int64_t images_)
    : C(C_), H(H_), W(W_), O(O_), images(images_), th((H_ + 1) / 2), tw((W_ + 1) / 2) {
  T = images * th * tw;
  Ts = (T + kLanes - 1) / kLanes * kLanes;
  v_plane = C * Ts + kLanes;
  m_plane = O * Ts + kLanes;
}

int64_t WinogradShape::group(int64_t C, int64_t H, int64_t W, int64_t O) {
  constexpr int64_t kTiles = 160, kScratchBytes = 768 << 10;
  int64_t images = 1;
  while (images < 8 && (images + 1) * ((H + 1) / 2) * ((W + 1) / 2) <= kTiles &&
         int64_t(sizeof(float)) * WinogradShape(C, H, W, O, images + 1).scratch_floats() <=
             kScratchBytes)
    ++images;
  return images;
}

bool winograd_conv_takes(int64_t C, int64_t H, int64_t W, int64_t O) {
  const WinogradUse use = in_use.load(std::memory_order_relaxed);
  if (use == WinogradUse::off || !__builtin_cpu_supports("avx512f") || W > 28) return false;
  // 16 -> 16 gains at 28 x 28 and 14 x 14 and loses at 7 x 7, 8 -> 8 loses at 28 x 28: with few
  // channels the transforms cost more against the 16 C products a tile; 32 channels or more gain
  // at every size (`bench_conv`; docs/CPU_KERNELS.md, "Winograd's F(2x2, 3x3)")
  const bool faster = C >= 16 && O >= 16 && (C + O >= 64 || H * W >= 196);
  return use == WinogradUse::always || faster;
}

void set_winograd_conv_use(WinogradUse use) { in_use.store(use, std::memory_order_relaxed); }

// G applied along three values: (g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2).
inline void kernel_transform(float g0, float g1, float g2, float out[4]) {
  out[0] = g0;
  out[1] = 0.5f * (g0 + g1 + g2);
  out[2] = 0.5f * (g0 - g1 + g2);
  out[3] = g2;
}

namespace {

// Planes i * 4 .. i * 4 + 3 of U: row i of G g (element i of G applied down each column of taps),
// then G along that row. i is a constant, so the loop over o vectorizes.
template <int i>
QKV_AVX512 void weights_row(const WinogradShape& s, const float* wt, float* u) {
  const int64_t C = s.C, O = s.O;
  for (int64_t c = 0; c < C; ++c) {
    const float* g = wt + c * 9 * O;  // tap (i, j) of output o at g[(3 i + j) O + o]
    float* uc = u + c * O;
#pragma omp simd
    for (int64_t o = 0; o < O; ++o) {
      float gi[3];
      for (int j = 0; j < 3; ++j) {
        float column[4];
        kernel_transform(g[j * O + o], g[(3 + j) * O + o], g[(6 + j) * O + o], column);
        gi[j] = column[i];
      }
      float row[4];
      kernel_transform(gi[0], gi[1], gi[2], row);
      for (int k = 0; k < 4; ++k) uc[(i * 4 + k) * C * O + o] = row[k];
    }
  }
}

}  // namespace

// One row of G g at a time, so four of U's planes are written together, not sixteen: the planes
// lie C O floats apart, a multiple of 4 KB from 32 channels on, and sixteen lines in one set of
// the L1 (which holds 12) evicted each other on every store.
void winograd_weights(const WinogradShape& s, const float* wt, float* u) {
  weights_row<0>(s, wt, u);
  weights_row<1>(s, wt, u);
  weights_row<2>(s, wt, u);
  weights_row<3>(s, wt, u);
}

void winograd_conv_forward(const WinogradShape& s, const float* x, const float* u,
                           const float* bias, float* y, float* scratch, PrefetchAhead ahead) {
  float* v = scratch;
  float* m = scratch + 16 * s.v_plane;
  transform_input(s, x, v);
  products(s, u, v, m, ahead);
  transform_output(s, m, bias, y);
}

}  // namespace qkv::cpu
