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
// The sums of the 16 int32 lanes of each of a, b, c, d, as the four lanes of one vector: each is
// stored and its four 128-bit quarters added, then two rounds of pairwise adds across the four.
// (Not _mm512_reduce_add_epi32 or 256-bit extracts: GCC 12 warns inside those intrinsics.)
__attribute__((target("avx512f,ssse3"))) __m128i sum_lanes4(__m512i a, __m512i b, __m512i c,
                                                            __m512i d) {
  alignas(64) int32_t lanes[4][16];
  _mm512_store_si512(lanes[0], a);
  _mm512_store_si512(lanes[1], b);
  _mm512_store_si512(lanes[2], c);
  _mm512_store_si512(lanes[3], d);
  __m128i q[4];
  for (int i = 0; i < 4; ++i) {
    const __m128i* p = reinterpret_cast<const __m128i*>(lanes[i]);
    q[i] = _mm_add_epi32(_mm_add_epi32(_mm_load_si128(p), _mm_load_si128(p + 1)),
                         _mm_add_epi32(_mm_load_si128(p + 2), _mm_load_si128(p + 3)));
  }
  return _mm_hadd_epi32(_mm_hadd_epi32(q[0], q[1]), _mm_hadd_epi32(q[2], q[3]));
}

// R activation rows by four output channels per pass: each 64-byte load of a weight row serves R
// rows and each load of an activation row serves four channels (16 accumulators at R = 4).
// Channels past o1 repeat the last one and their sums are dropped, so the loop has no branches.
template <int R>
__attribute__((target("avx512vnni,avx512bw,avx512f,ssse3"))) void dot_block_vnni(
    const uint8_t* xu, const int8_t* w, const int32_t* w_sums, int64_t o0, int64_t o1, int64_t K,
    int64_t out, int32_t* acc) {
  for (int64_t o = o0; o < o1; o += 4) {
    const int8_t* wrow[4];
    for (int j = 0; j < 4; ++j) wrow[j] = w + std::min(o + j, o1 - 1) * K;
    __m512i a[R][4];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) a[r][j] = _mm512_setzero_si512();
    for (int64_t k = 0; k < K; k += 64) {
      __m512i wv[4];
      for (int j = 0; j < 4; ++j) wv[j] = _mm512_loadu_si512(wrow[j] + k);
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_loadu_si512(xu + r * K + k);
        for (int j = 0; j < 4; ++j) a[r][j] = _mm512_dpbusd_epi32(a[r][j], xv, wv[j]);
      }
    }
    // Take the +128 shift of the activations back out: - 128 * sum(w) per channel.
    int32_t shift[4];
    for (int j = 0; j < 4; ++j) shift[j] = 128 * w_sums[std::min(o + j, o1 - 1)];
    const __m128i shift_v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(shift));
    for (int r = 0; r < R; ++r) {
      alignas(16) int32_t sums[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(sums),
                      _mm_sub_epi32(sum_lanes4(a[r][0], a[r][1], a[r][2], a[r][3]), shift_v));
      for (int j = 0; j < 4 && o + j < o1; ++j) acc[r * out + o + j] = sums[j];
    }
  }
}

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
    for (int64_t i = 0; i < rows * K; ++i) shifted[size_t(i)] = uint8_t(int(x[i]) + 128);
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
