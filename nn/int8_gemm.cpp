#include "nn/int8_gemm.h"

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
// Horizontal sum of 16 int32 lanes. (Not _mm512_reduce_add_epi32: GCC 12 warns inside it.)
__attribute__((target("avx512f"))) int32_t sum_lanes(__m512i v) {
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, v);
  int32_t s = 0;
  for (int32_t x : lanes) s += x;
  return s;
}

// Four output channels per pass share each 64-byte load of the activations.
__attribute__((target("avx512vnni,avx512bw,avx512f"))) void dot_rows_vnni(const uint8_t* xu,
                                                                          const int8_t* w,
                                                                          const int32_t* w_sums,
                                                                          int64_t o0, int64_t o1,
                                                                          int64_t K, int32_t* acc) {
  int64_t o = o0;
  for (; o + 4 <= o1; o += 4) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    const int8_t* w0 = w + o * K;
    for (int64_t k = 0; k < K; k += 64) {
      const __m512i xv = _mm512_loadu_si512(xu + k);
      a0 = _mm512_dpbusd_epi32(a0, xv, _mm512_loadu_si512(w0 + k));
      a1 = _mm512_dpbusd_epi32(a1, xv, _mm512_loadu_si512(w0 + K + k));
      a2 = _mm512_dpbusd_epi32(a2, xv, _mm512_loadu_si512(w0 + 2 * K + k));
      a3 = _mm512_dpbusd_epi32(a3, xv, _mm512_loadu_si512(w0 + 3 * K + k));
    }
    acc[o] = sum_lanes(a0) - 128 * w_sums[o];
    acc[o + 1] = sum_lanes(a1) - 128 * w_sums[o + 1];
    acc[o + 2] = sum_lanes(a2) - 128 * w_sums[o + 2];
    acc[o + 3] = sum_lanes(a3) - 128 * w_sums[o + 3];
  }
  for (; o < o1; ++o) {
    __m512i a = _mm512_setzero_si512();
    for (int64_t k = 0; k < K; k += 64)
      a = _mm512_dpbusd_epi32(a, _mm512_loadu_si512(xu + k), _mm512_loadu_si512(w + o * K + k));
    acc[o] = sum_lanes(a) - 128 * w_sums[o];
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
  std::vector<uint8_t> shifted;
  if (use_vnni) {
    shifted.resize(size_t(rows * K));
    for (int64_t i = 0; i < rows * K; ++i) shifted[size_t(i)] = uint8_t(int(x[i]) + 128);
  }
  // Split over output channels: at batch 1 the rows give no parallelism, the weights do.
  const int64_t grain = std::max<int64_t>(16, (1 << 16) / K);
  for (int64_t r = 0; r < rows; ++r)
    parallel_for(0, out, grain, [&](int64_t o0, int64_t o1) {
#if defined(__x86_64__)
      if (use_vnni) {
        dot_rows_vnni(shifted.data() + r * K, w, w_sums, o0, o1, K, acc + r * out);
        return;
      }
#endif
      (void)w_sums;
      dot_rows_portable(x + r * K, w, o0, o1, K, acc + r * out);
    });
}

}  // namespace qkv::nn
