// The small-problem attention path (see small_attention.h): one (batch, head) problem per tile.
//
// Every matrix of the problem lives in a 64-byte aligned scratch buffer, the scores in rows of
// kMax = 64 floats, so a row of scores is at most four aligned zmm vectors. Two register-blocked
// products do all the multiply-adds:
// - times_packed: C = alpha * A B^T with B^T packed (gemm_pack.h's 16 x 16 in-register
//   transposes, columns padded with zeros to a multiple of 16): the scores Q K^T and, in the
//   backward, dP = dO V^T. Each depth step loads the columns' vectors once and broadcasts one A
//   value per row.
// - times_rows: C = A B with B's rows read in place (masked loads at the row's end) and A read
//   through any two strides, so the same loop gives P V, P^T dO, dS K and dS^T Q.
// The backward recomputes Q K^T (and packs K^T for it) only when the forward kept no weights.
//
// The functions carry target("avx512f") instead of relying on -march: this file is compiled into
// every build and only called after cpuid says the CPU has AVX-512F.
#include "engine/cpu/small_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "engine/cpu/avx512_target.h"
#include "engine/cpu/gemm_pack.h"
#include "engine/cpu/scratch_buffer.h"

namespace qkv::cpu {

namespace {

constexpr int64_t kMax = 64;  // the largest T, S, d, dv, and every scratch matrix's row stride

std::atomic<bool> turned_on{true};

bool cpu_has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// Bits [0, n) of a word, n in [0, 64].
inline uint64_t first_bits(int64_t n) { return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1; }

// vec_math.h's fast_exp on 16 lanes, step for step.
QKV_AVX512_INLINE __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 shifter = _mm512_set1_ps(12582912.0f);
  const __m512 k =
      _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), shifter), shifter);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), xc);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.42860682030941723e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  const __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), y);  // 0 below lo (and -inf)
}

// log(x) on 16 lanes of positive normal floats, to about an ulp: x = 2^e f with f in
// [sqrt(1/2), sqrt(2)) (getexp and getmant split x exactly), and log f = 2 atanh(z) with
// z = (f - 1) / (f + 1), |z| < 0.172, summed to the z^9 term (the next is below 1e-9).
QKV_AVX512_INLINE __m512 log16(__m512 x) {
  __m512 e = _mm512_getexp_ps(x);
  __m512 f = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);
  const __mmask16 high = _mm512_cmp_ps_mask(f, _mm512_set1_ps(1.41421356f), _CMP_GT_OQ);
  f = _mm512_mask_mul_ps(f, high, f, _mm512_set1_ps(0.5f));
  e = _mm512_mask_add_ps(e, high, e, _mm512_set1_ps(1));
  const __m512 one = _mm512_set1_ps(1);
  const __m512 z = _mm512_div_ps(_mm512_sub_ps(f, one), _mm512_add_ps(f, one));
  const __m512 z2 = _mm512_mul_ps(z, z);
  __m512 series = _mm512_set1_ps(1.0f / 9);
  series = _mm512_fmadd_ps(series, z2, _mm512_set1_ps(1.0f / 7));
  series = _mm512_fmadd_ps(series, z2, _mm512_set1_ps(1.0f / 5));
  series = _mm512_fmadd_ps(series, z2, _mm512_set1_ps(1.0f / 3));
  series = _mm512_fmadd_ps(series, z2, one);
  const __m512 log_f = _mm512_mul_ps(_mm512_add_ps(z, z), series);
  return _mm512_fmadd_ps(e, _mm512_set1_ps(0.693147180559945f), log_f);
}

// Rows rounded up to whole vectors: the row stride of a packed B^T.
inline int64_t padded(int64_t rows) { return (rows + 15) / 16 * 16; }

// bt[c * padded(rows) + j] = src[j * ld + c] for j < rows, c < width; columns [rows,
// padded(rows)) are zero, so a product with bt has no garbage lanes.
void pack_transposed(const float* src, int64_t ld, int64_t rows, int64_t width, float* bt) {
  pack_transposed_avx512<float>(src, ld, rows, width, int(padded(rows)), bt);
}

// c[r * kMax + 16 v + i] = alpha * sum_x a[r * lda + x] * bt[x * 16 NV + 16 v + i] for R rows
// and NV vectors of columns; c and bt are 64-byte aligned.
template <int R, int NV>
QKV_AVX512_INLINE void block_times_packed(const float* a, int64_t lda, const float* bt,
                                          int64_t depth, float alpha, float* c) {
  __m512 acc[R][NV];
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t x = 0; x < depth; ++x) {
    __m512 b[NV];
    _Pragma("GCC unroll 8") for (int v = 0; v < NV; ++v) b[v] =
        _mm512_load_ps(bt + x * 16 * NV + 16 * v);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r * lda + x]);
      _Pragma("GCC unroll 8") for (int v = 0; v < NV; ++v) acc[r][v] =
          _mm512_fmadd_ps(ar, b[v], acc[r][v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int v = 0; v < NV; ++v)
          _mm512_store_ps(c + r * kMax + 16 * v, _mm512_mul_ps(acc[r][v], scale));
}

// Rows in blocks of 8 (for at most two column vectors: 16 accumulators), 4, 2, then 1, so that
// most FMAs have enough independent accumulators to hide their latency.
template <int NV>
QKV_AVX512 void rows_times_packed(const float* a, int64_t lda, int64_t rows, const float* bt,
                                  int64_t depth, float alpha, float* c) {
  int64_t r = 0;
  if constexpr (NV <= 2)
    for (; r + 8 <= rows; r += 8)
      block_times_packed<8, NV>(a + r * lda, lda, bt, depth, alpha, c + r * kMax);
  for (; r + 4 <= rows; r += 4)
    block_times_packed<4, NV>(a + r * lda, lda, bt, depth, alpha, c + r * kMax);
  for (; r + 2 <= rows; r += 2)
    block_times_packed<2, NV>(a + r * lda, lda, bt, depth, alpha, c + r * kMax);
  for (; r < rows; ++r) block_times_packed<1, NV>(a + r * lda, lda, bt, depth, alpha, c + r * kMax);
}

// c (rows x cols, row stride kMax) = alpha * a (rows x depth, row stride lda) @ bt^T, where bt
// is packed by pack_transposed from cols rows.
QKV_AVX512 void times_packed(const float* a, int64_t lda, int64_t rows, const float* bt,
                             int64_t depth, int64_t cols, float alpha, float* c) {
  switch ((cols + 15) / 16) {
    case 1:
      return rows_times_packed<1>(a, lda, rows, bt, depth, alpha, c);
    case 2:
      return rows_times_packed<2>(a, lda, rows, bt, depth, alpha, c);
    case 3:
      return rows_times_packed<3>(a, lda, rows, bt, depth, alpha, c);
    case 4:
      return rows_times_packed<4>(a, lda, rows, bt, depth, alpha, c);
    default:
      return;
  }
}

// An operand read through two strides: element (r, x) at data[r * row + x * step].
struct Strided {
  const float* data;
  int64_t row, step;
};

// c[r * ldc + 16 v + i] = sum_x a(r, x) * b[x * ldb + 16 v + i] for R rows and NV vectors of
// columns, the last vector's lanes limited to `last`.
template <int R, int NV>
QKV_AVX512_INLINE void block_times_rows(Strided a, int64_t depth, const float* b, int64_t ldb,
                                        __mmask16 last, float* c, int64_t ldc) {
  __m512 acc[R][NV];
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t x = 0; x < depth; ++x) {
    __m512 bv[NV];
    _Pragma("GCC unroll 8") for (int v = 0; v < NV; ++v) bv[v] =
        _mm512_maskz_loadu_ps(v == NV - 1 ? last : __mmask16(0xffff), b + x * ldb + 16 * v);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a.data[r * a.row + x * a.step]);
      _Pragma("GCC unroll 8") for (int v = 0; v < NV; ++v) acc[r][v] =
          _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(
          c + r * ldc + 16 * v, v == NV - 1 ? last : __mmask16(0xffff), acc[r][v]);
}

template <int R, int NV>
QKV_AVX512_INLINE void blocks_times_rows(int64_t& r, int64_t rows, Strided a, int64_t depth,
                                         const float* b, int64_t ldb, __mmask16 last, float* c,
                                         int64_t ldc) {
  for (; r + R <= rows; r += R)
    block_times_rows<R, NV>({a.data + r * a.row, a.row, a.step}, depth, b, ldb, last, c + r * ldc,
                            ldc);
}

// Rows in blocks of 8 (for at most two column vectors), 4, 2, then 1, as rows_times_packed.
template <int NV>
QKV_AVX512 void rows_times_rows(Strided a, int64_t rows, int64_t depth, const float* b, int64_t ldb,
                                __mmask16 last, float* c, int64_t ldc) {
  int64_t r = 0;
  if constexpr (NV <= 2) blocks_times_rows<8, NV>(r, rows, a, depth, b, ldb, last, c, ldc);
  blocks_times_rows<4, NV>(r, rows, a, depth, b, ldb, last, c, ldc);
  blocks_times_rows<2, NV>(r, rows, a, depth, b, ldb, last, c, ldc);
  blocks_times_rows<1, NV>(r, rows, a, depth, b, ldb, last, c, ldc);
}

// c (rows x width, row stride ldc) = a (rows x depth) @ b (depth x width, row stride ldb).
QKV_AVX512 void times_rows(Strided a, int64_t rows, int64_t depth, const float* b, int64_t ldb,
                           int64_t width, float* c, int64_t ldc) {
  const int nv = int((width + 15) / 16);
  const __mmask16 last = lanes_below(width - 16 * (nv - 1));
  switch (nv) {
    case 1:
      return rows_times_rows<1>(a, rows, depth, b, ldb, last, c, ldc);
    case 2:
      return rows_times_rows<2>(a, rows, depth, b, ldb, last, c, ldc);
    case 3:
      return rows_times_rows<3>(a, rows, depth, b, ldb, last, c, ldc);
    case 4:
      return rows_times_rows<4>(a, rows, depth, b, ldb, last, c, ldc);
    default:
      return;
  }
}

// The dropout factors of 16 weights from their bits of a kept word: kept_scale or 0.
QKV_AVX512_INLINE __m512 kept_factors(uint64_t kept, int v, __m512 kept_scale) {
  return _mm512_maskz_mov_ps(__mmask16(kept >> (16 * v)), kept_scale);
}

// The sum of x and y, or (Max) their larger, lane by lane.
template <bool Max>
QKV_AVX512_INLINE __m512 combine(__m512 x, __m512 y) {
  return Max ? _mm512_max_ps(x, y) : _mm512_add_ps(x, y);
}
// One round of reduce_rows16: v[j] and v[j + h] (j < h) become one vector whose lanes l with bit
// h clear hold v[j]'s lanes l and l ^ h combined, and whose other lanes hold v[j + h]'s.
template <bool Max, int h>
QKV_AVX512_INLINE void reduce_round(__m512 v[16], __mmask16 upper) {
  for (int j = 0; j < h; ++j) {
    const __m512 keep = _mm512_mask_blend_ps(upper, v[j], v[j + h]);
    const __m512 other = _mm512_mask_blend_ps(upper, v[j + h], v[j]);
    __m512 swapped;  // other with lanes l and l ^ h exchanged
    if constexpr (h == 8) swapped = _mm512_shuffle_f32x4(other, other, 0x4e);
    if constexpr (h == 4) swapped = _mm512_shuffle_f32x4(other, other, 0xb1);
    if constexpr (h == 2) swapped = _mm512_permute_ps(other, 0x4e);
    if constexpr (h == 1) swapped = _mm512_permute_ps(other, 0xb1);
    v[j] = combine<Max>(keep, swapped);
  }
}
// Lane i of the result = the sum (Max: the largest) of the 16 lanes of v[i], which it overwrites:
// sixteen rows' reductions at once, in four rounds that each halve the vectors, instead of sixteen
// horizontal reductions one after another.
template <bool Max>
QKV_AVX512_INLINE __m512 reduce_rows16(__m512 v[16]) {
  reduce_round<Max, 8>(v, 0xff00);
  reduce_round<Max, 4>(v, 0xf0f0);
  reduce_round<Max, 2>(v, 0xcccc);
  reduce_round<Max, 1>(v, 0xaaaa);
  return v[0];
}

// The forward's rows, sixteen at a time: the T rows of S scaled scores in sc (row stride kMax)
// become the weights the product with V takes, in place: P = exp(score - m) / l on the visible
// keys (0 on the others), m the row's largest visible score and l the sum of the exps, times the
// dropout factors with dropout. P itself (before dropout) goes to weights (row stride S) when it
// is not null; m[t] and l[t] are each row's m and l (-inf and 0, and a row of zeros, when no key
// is visible). m, l and the row of inverses (1 / l, or 0) at l + kMax + 16 each take kMax + 16
// floats (whole vectors of sixteen rows).
template <int nv>
QKV_AVX512 void weights_rows(const SmallAttention& a, float* sc, float* weights, float* m,
                             float* l) {
  const bool dropout = a.kept != nullptr;
  const int64_t S = a.S;
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 kept_scale = _mm512_set1_ps(a.kept_scale);
  float* inverse = l + kMax + 16;
  for (int64_t t0 = 0; t0 < a.T; t0 += 16) {
    const int rows = int(std::min<int64_t>(16, a.T - t0));
    __m512 part[16];
    for (int i = 0; i < 16; ++i) {  // each row's largest visible score, lane-wise
      part[i] = minus_inf;
      if (i >= rows) continue;
      const uint64_t visible = a.visible[t0 + i] & first_bits(S);
      const float* row = sc + (t0 + i) * kMax;
      for (int v = 0; v < nv; ++v)
        part[i] = _mm512_mask_max_ps(part[i], __mmask16(visible >> (16 * v)), part[i],
                                     _mm512_load_ps(row + 16 * v));
    }
    _mm512_storeu_ps(m + t0, reduce_rows16<true>(part));
    for (int i = 0; i < 16; ++i) {  // exps, and their sums lane-wise
      part[i] = _mm512_setzero_ps();
      if (i >= rows) continue;
      const uint64_t visible = a.visible[t0 + i] & first_bits(S);
      float* row = sc + (t0 + i) * kMax;
      const __m512 mi = _mm512_set1_ps(m[t0 + i]);
      for (int v = 0; v < nv; ++v) {
        const __m512 e = _mm512_maskz_mov_ps(
            __mmask16(visible >> (16 * v)), exp16(_mm512_sub_ps(_mm512_load_ps(row + 16 * v), mi)));
        _mm512_store_ps(row + 16 * v, e);
        part[i] = _mm512_add_ps(part[i], e);
      }
    }
    const __m512 sums = reduce_rows16<false>(part);
    _mm512_storeu_ps(l + t0, sums);
    const __mmask16 any = _mm512_cmp_ps_mask(sums, _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_storeu_ps(inverse + t0, _mm512_maskz_div_ps(any, _mm512_set1_ps(1), sums));
    for (int i = 0; i < rows; ++i) {  // P = e / l, kept, then dropped
      const int64_t t = t0 + i;
      float* row = sc + t * kMax;
      const __m512 f = _mm512_set1_ps(inverse[t]);
      for (int v = 0; v < nv; ++v) {
        const __m512 p = _mm512_mul_ps(_mm512_load_ps(row + 16 * v), f);
        if (weights) _mm512_mask_storeu_ps(weights + t * S + 16 * v, lanes_below(S - 16 * v), p);
        _mm512_store_ps(
            row + 16 * v,
            dropout ? _mm512_maskz_mul_ps(__mmask16(a.kept[t] >> (16 * v)), p, kept_scale) : p);
      }
    }
  }
}

// A row of P, 16 lanes at a time (vector v holds keys [16 v, 16 v + 16)), as the forward kept it
// (row stride S) ...
struct KeptWeights {
  const float* row;
  int64_t S;
  QKV_AVX512_INLINE __m512 operator()(int v) const {
    return _mm512_maskz_loadu_ps(lanes_below(S - 16 * v), row + 16 * v);
  }
};

// ... or recomputed from the row's scaled scores: exp(score - lse) on the visible keys.
struct RecomputedWeights {
  const float* scores;
  uint64_t visible;
  float lse;
  QKV_AVX512_INLINE __m512 operator()(int v) const {
    return _mm512_maskz_mov_ps(
        __mmask16(visible >> (16 * v)),
        exp16(_mm512_sub_ps(_mm512_load_ps(scores + 16 * v), _mm512_set1_ps(lse))));
  }
};

// One row of the backward: P (its 16-lane vectors from `weight`) and dP = dO V^T in dp become
// Z P in p (the weights dV takes) and dS = P (Z dP - D) * scale in dp, Z being the dropout
// factors (1 without dropout).
template <typename Weight>
QKV_AVX512_INLINE void gradient_row(Weight weight, float* p, float* dp, int64_t S, float D,
                                    float scale, bool dropout, uint64_t kept, float kept_scale) {
  const int nv = int((S + 15) / 16);
  const __m512 vD = _mm512_set1_ps(D), vscale = _mm512_set1_ps(scale),
               vkept = _mm512_set1_ps(kept_scale);
  for (int v = 0; v < nv; ++v) {
    const __m512 pv = weight(v);
    __m512 dpv = _mm512_load_ps(dp + 16 * v), zp = pv;
    if (dropout) {
      const __m512 z = kept_factors(kept, v, vkept);
      dpv = _mm512_mul_ps(z, dpv);
      zp = _mm512_mul_ps(z, pv);
    }
    _mm512_store_ps(dp + 16 * v, _mm512_mul_ps(_mm512_mul_ps(pv, _mm512_sub_ps(dpv, vD)), vscale));
    _mm512_store_ps(p + 16 * v, zp);
  }
}

// The products a[c] * b[c] of n <= 64 values summed lane-wise: their sum is the dot product.
QKV_AVX512_INLINE __m512 dot16(const float* a, const float* b, int64_t n) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 on = lanes_below(n - c);
    s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(on, a + c), _mm512_maskz_loadu_ps(on, b + c), s);
  }
  return s;
}

// Per-thread scratch: four kMax x kMax matrices and a row of kMax + 16, kept between calls.
float* scratch_floats() {
  thread_local ScratchBuffer buffer;
  return static_cast<float*>(buffer.get(sizeof(float) * (4 * kMax * kMax + kMax + 16)));
}

QKV_AVX512 void kept_words_avx512(const float* factors, int64_t rows, int64_t S, uint64_t* words) {
  const int nv = int((S + 15) / 16);
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t word = 0;
    for (int v = 0; v < nv; ++v) {
      const __m512 f = _mm512_maskz_loadu_ps(lanes_below(S - 16 * v), factors + r * S + 16 * v);
      word |= uint64_t(_mm512_cmp_ps_mask(f, _mm512_setzero_ps(), _CMP_NEQ_UQ)) << (16 * v);
    }
    words[r] = word;
  }
}

QKV_AVX512 void forward_avx512(const SmallAttention& a, float* out, int64_t ldo, float* lse,
                               float* weights) {
  float* kt = scratch_floats();  // K^T [d][padded(S)]
  float* sc = kt + kMax * kMax;  // scores, then the weights (with dropout's factors) [T][kMax]
  pack_transposed(a.k, a.ldk, a.S, a.d, kt);
  times_packed(a.q, a.ldq, a.T, kt, a.d, a.S, a.scale, sc);
  float* m = sc + kMax * kMax;  // each row's largest visible score
  float* l = m + kMax + 16;     // each row's sum of exps (their inverses after them)
  switch ((a.S + 15) / 16) {
    case 1:
      weights_rows<1>(a, sc, weights, m, l);
      break;
    case 2:
      weights_rows<2>(a, sc, weights, m, l);
      break;
    case 3:
      weights_rows<3>(a, sc, weights, m, l);
      break;
    default:
      weights_rows<4>(a, sc, weights, m, l);
      break;
  }
  for (int64_t t0 = 0; t0 < a.T; t0 += 16) {  // lse = m + log l, -inf where l = 0
    const __mmask16 rows = lanes_below(a.T - t0);
    const __m512 lv = _mm512_loadu_ps(l + t0);
    const __mmask16 any = _mm512_mask_cmp_ps_mask(rows, lv, _mm512_setzero_ps(), _CMP_GT_OQ);
    const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    _mm512_mask_storeu_ps(
        lse + t0, rows,
        _mm512_mask_add_ps(minus_inf, any, _mm512_loadu_ps(m + t0),
                           log16(_mm512_mask_mov_ps(_mm512_set1_ps(1), any, lv))));
  }
  times_rows({sc, kMax, 1}, a.T, a.S, a.v, a.ldv, a.dv, out, ldo);  // out = (Z P) V
}

QKV_AVX512 void backward_avx512(const SmallAttention& a, const float* out, int64_t ldo,
                                const float* gout, int64_t ldgo, const float* lse,
                                const float* weights, float* gq, int64_t ldgq, float* gk,
                                int64_t ldgk, float* gv, int64_t ldgv) {
  float* vt = scratch_floats();  // V^T [dv][padded(S)]
  float* kt = vt + kMax * kMax;  // K^T [d][padded(S)], when P is recomputed
  float* p = kt + kMax * kMax;   // scores (when P is recomputed), then Z P [T][kMax]
  float* dp = p + kMax * kMax;   // dP, then dS [T][kMax]
  pack_transposed(a.v, a.ldv, a.S, a.dv, vt);
  times_packed(gout, ldgo, a.T, vt, a.dv, a.S, 1, dp);
  if (!weights) {
    pack_transposed(a.k, a.ldk, a.S, a.d, kt);
    times_packed(a.q, a.ldq, a.T, kt, a.d, a.S, a.scale, p);
  }
  float* D = dp + kMax * kMax;  // rowsum(dO * O), sixteen rows at a time
  for (int64_t t0 = 0; t0 < a.T; t0 += 16) {
    __m512 part[16];
    for (int i = 0; i < 16; ++i)
      part[i] = t0 + i < a.T ? dot16(gout + (t0 + i) * ldgo, out + (t0 + i) * ldo, a.dv)
                             : _mm512_setzero_ps();
    _mm512_storeu_ps(D + t0, reduce_rows16<false>(part));
  }
  const bool dropout = a.kept != nullptr;
  for (int64_t t = 0; t < a.T; ++t) {
    const uint64_t kept = dropout ? a.kept[t] : 0;
    float* prow = p + t * kMax;
    if (weights) {
      gradient_row(KeptWeights{weights + t * a.S, a.S}, prow, dp + t * kMax, a.S, D[t], a.scale,
                   dropout, kept, a.kept_scale);
    } else {
      const float L = lse[t];
      const uint64_t visible =
          L == -std::numeric_limits<float>::infinity() ? 0 : a.visible[t] & first_bits(a.S);
      gradient_row(RecomputedWeights{prow, visible, L}, prow, dp + t * kMax, a.S, D[t], a.scale,
                   dropout, kept, a.kept_scale);
    }
  }
  times_rows({p, 1, kMax}, a.S, a.T, gout, ldgo, a.dv, gv, ldgv);  // dV = (Z P)^T dO
  times_rows({dp, kMax, 1}, a.T, a.S, a.k, a.ldk, a.d, gq, ldgq);  // dQ = dS K
  times_rows({dp, 1, kMax}, a.S, a.T, a.q, a.ldq, a.d, gk, ldgk);  // dK = dS^T Q
}

}  // namespace

bool small_attention_fits(int64_t T, int64_t S, int64_t d, int64_t dv) {
  return T >= 1 && S >= 1 && d >= 1 && dv >= 1 && T <= kMax && S <= kMax && d <= kMax && dv <= kMax;
}

bool small_attention_enabled() { return cpu_has_avx512f() && turned_on.load(); }

void set_small_attention_enabled(bool on) { turned_on.store(on); }

void small_attention_kept_words(const float* factors, int64_t rows, int64_t S, uint64_t* words) {
  kept_words_avx512(factors, rows, S, words);
}

void small_attention_forward(const SmallAttention& a, float* out, int64_t ldo, float* lse,
                             float* weights) {
  forward_avx512(a, out, ldo, lse, weights);
}

void small_attention_backward(const SmallAttention& a, const float* out, int64_t ldo,
                              const float* gout, int64_t ldgo, const float* lse,
                              const float* weights, float* gq, int64_t ldgq, float* gk,
                              int64_t ldgk, float* gv, int64_t ldgv) {
  backward_avx512(a, out, ldo, gout, ldgo, lse, weights, gq, ldgq, gk, ldgk, gv, ldgv);
}

}  // namespace qkv::cpu
