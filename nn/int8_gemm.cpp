#include "nn/int8_gemm.h"

#include <algorithm>
#include <vector>

#include "engine/parallel.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace qkv::nn {

namespace {

void dot_rows_portable(const int8_t* x, const int8_t* w, int64_t o0, int64_t o1, int64_t K,
                       int32_t* acc) {
  for (int64_t o = o0; o < o1; ++o) {
    const int8_t* wo = w + o * K;
    int32_t s = 0;
    for (int64_t k = 0; k < K; ++k) s += int32_t(x[k]) * int32_t(wo[k]);
    acc[o] = s;
  }
}

#if defined(__x86_64__)
// Horizontal sums of J int32 vectors at once, by one transpose-and-add tree (as the float kernel in
// engine/cpu/gemm_small_m.cpp does): far fewer instructions than J separate reductions.
// GCC 12's AVX-512 headers build unpack, shuffle and extract on a self-initialized "undefined"
// vector, which -Wmaybe-uninitialized reports wherever they are inlined (GCC bug 105593).
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC-only warning; clang would warn about the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define QKV_VNNI_TARGET __attribute__((target("avx512vnni,avx512bw,avx512f,avx2")))

// Per 128-bit lane: x0+x1, y0+y1, x2+x3, y2+y3.
QKV_VNNI_TARGET inline __m512i add_pairs(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
}
// Of two add_pairs results: per 128-bit lane, one partial sum of each of the four vectors.
QKV_VNNI_TARGET inline __m512i add_quads(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(x, y), _mm512_unpackhi_epi64(x, y));
}

// The totals of four vectors, in order, in `sums`.
QKV_VNNI_TARGET inline void sum_each(const __m512i (&v)[4], int32_t* sums) {
  const __m512i s = add_quads(add_pairs(v[0], v[1]), add_pairs(v[2], v[3]));
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(sums),
                   _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

// The totals of eight vectors, in order, in `sums`.
QKV_VNNI_TARGET inline void sum_each(const __m512i (&v)[8], int32_t* sums) {
  const __m512i lo = add_quads(add_pairs(v[0], v[1]), add_pairs(v[2], v[3]));  // 0-3 per lane
  const __m512i hi = add_quads(add_pairs(v[4], v[5]), add_pairs(v[6], v[7]));  // 4-7 per lane
  const __m512i even = _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i odd = _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
  const __m512i w = _mm512_add_epi32(even, odd);  // [0-3 a, 0-3 b, 4-7 a, 4-7 b]
  const __m512i x = _mm512_shuffle_i32x4(w, w, _MM_SHUFFLE(3, 1, 2, 0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums),
                      _mm256_add_epi32(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1)));
}

// R activation rows by J output channels per pass: each 64-byte load of a weight row serves R
// rows and each load of an activation row serves J channels. J = 8 for one or two rows (eight
// independent dot-product chains hide the instruction's latency), 4 for three or four rows (16
// accumulators at R = 4). Channels past o1 repeat the last one and their sums are dropped, so the
// loop has no branches.
template <int R>
QKV_VNNI_TARGET void dot_block_vnni(const uint8_t* xu, const int8_t* w, const int32_t* w_sums,
                                    int64_t o0, int64_t o1, int64_t K, int64_t out, int32_t* acc) {
  constexpr int J = R <= 2 ? 8 : 4;
  for (int64_t o = o0; o < o1; o += J) {
    const int8_t* wrow[J];
    for (int j = 0; j < J; ++j) wrow[j] = w + std::min(o + j, o1 - 1) * K;
    __m512i a[R][J];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < J; ++j) a[r][j] = _mm512_setzero_si512();
    for (int64_t k = 0; k < K; k += 64) {
      __m512i xv[R];
      for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_si512(xu + r * K + k);
      for (int j = 0; j < J; ++j) {
        const __m512i wv = _mm512_loadu_si512(wrow[j] + k);
        for (int r = 0; r < R; ++r) a[r][j] = _mm512_dpbusd_epi32(a[r][j], xv[r], wv);
      }
    }
    for (int r = 0; r < R; ++r) {
      int32_t sums[J];
      sum_each(a[r], sums);
      // Take the +128 shift of the activations back out: - 128 * sum(w) per channel.
      for (int j = 0; j < J && o + j < o1; ++j)
        acc[r * out + o + j] = sums[j] - 128 * w_sums[o + j];
    }
  }
}
#undef QKV_VNNI_TARGET
#pragma GCC diagnostic pop

// Rows [r0, r0 + count) of x against channels [o0, o1), four rows at a time.
void rows_vnni(const uint8_t* xu, int64_t r0, int64_t count, const int8_t* w, const int32_t* w_sums,
               int64_t o0, int64_t o1, int64_t K, int64_t out, int32_t* acc) {
  for (int64_t r = r0; r < r0 + count;) {
    const int64_t left = r0 + count - r;
    const uint8_t* x = xu + r * K;
    int32_t* a = acc + r * out;
    if (left >= 4) {
      dot_block_vnni<4>(x, w, w_sums, o0, o1, K, out, a), r += 4;
    } else if (left == 3) {
      dot_block_vnni<3>(x, w, w_sums, o0, o1, K, out, a), r += 3;
    } else if (left == 2) {
      dot_block_vnni<2>(x, w, w_sums, o0, o1, K, out, a), r += 2;
    } else {
      dot_block_vnni<1>(x, w, w_sums, o0, o1, K, out, a), r += 1;
    }
  }
}
#endif

}  // namespace

bool cpu_has_vnni() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}

void int8_matmul(const int8_t* x, int64_t rows, const int8_t* w, const int32_t* w_sums, int64_t out,
                 int64_t K, int32_t* acc, bool use_vnni) {
  use_vnni = use_vnni && cpu_has_vnni();
#if defined(__x86_64__)
  if (use_vnni) {
    thread_local std::vector<uint8_t> shifted;
    shifted.resize(size_t(rows * K));
    uint8_t* xs = shifted.data();
    _Pragma("omp simd") for (int64_t i = 0; i < rows * K; ++i) xs[i] = uint8_t(int(x[i]) + 128);
    const uint8_t* xu = shifted.data();
    // Enough rows: threads take blocks of rows, each against every channel. A few rows (batch 1
    // decoding) give no parallelism there, so threads split the channels instead.
    if (rows >= 8) {
      parallel_for(0, (rows + 3) / 4, std::max<int64_t>(1, (1 << 14) / (out * K / 64 + 1)),
                   [&](int64_t b0, int64_t b1) {
                     const int64_t r0 = 4 * b0, r1 = std::min(rows, 4 * b1);
                     rows_vnni(xu, r0, r1 - r0, w, w_sums, 0, out, K, out, acc);
                   });
    } else {
      const int64_t grain = std::max<int64_t>(16, (1 << 16) / K);
      parallel_for(0, (out + 3) / 4, (grain + 3) / 4, [&](int64_t c0, int64_t c1) {
        rows_vnni(xu, 0, rows, w, w_sums, 4 * c0, std::min(out, 4 * c1), K, out, acc);
      });
    }
    return;
  }
#endif
  (void)w_sums;
  const int64_t grain = std::max<int64_t>(16, (1 << 16) / K);
  for (int64_t r = 0; r < rows; ++r)
    parallel_for(0, out, grain, [&](int64_t o0, int64_t o1) {
      dot_rows_portable(x + r * K, w, o0, o1, K, acc + r * out);
    });
}

}  // namespace qkv::nn
