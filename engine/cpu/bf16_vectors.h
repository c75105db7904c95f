// AVX-512 helpers shared by the bfloat16 GEMM's packing (gemm_bf16_pack.cpp) and its few-rows
// path (gemm_bf16_small_m.cpp): masked loads of bfloat16 or float32 values as bfloat16 (rounding
// the latter), and interleaving two lines into (low, high) pairs. Include only in .cpp files whose
// callers check amx_bf16_available() (engine/cpu/amx.h) or avx512_bf16_supported()
// (gemm_bf16_kernels.h), either of which implies every feature used here.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

// GCC 12 warns "'__Y' may be used uninitialized" inside its own AVX-512 headers wherever an
// intrinsic's pass-through operand is _mm512_undefined_*() (GCC bug 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define QKV_BF16_VECTORS __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define QKV_BF16_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) inline

namespace qkv::cpu::amx {

// Mask of the first `count` lanes (any count; clamped to 0..32).
inline uint32_t first_lanes(int64_t count) {
  return count >= 32 ? ~0u : count <= 0 ? 0u : (1u << count) - 1;
}

// Values p[0..32) as 32 bfloat16 (lanes outside `mask` zero). A float source is rounded to nearest
// even by VCVTNE2PS2BF16, which agrees with float_to_bf16 except that it reads float32 subnormals
// as zero; TDPBF16PS reads bfloat16 subnormals as zero anyway.
template <typename Source>
QKV_BF16_INLINE __m512i load32(const Source* p, uint32_t mask) {
  if constexpr (std::is_same_v<Source, float>) {
    const __m512 lo = _mm512_maskz_loadu_ps(__mmask16(mask), p);
    const __m512 hi = _mm512_maskz_loadu_ps(__mmask16(mask >> 16), p + 16);
    return __m512i(_mm512_cvtne2ps_pbh(hi, lo));
  } else {
    return _mm512_maskz_loadu_epi16(mask, p);
  }
}

// Values p[0..16) as 16 bfloat16, each zero-extended to a 32-bit lane.
template <typename Source>
QKV_BF16_INLINE __m512i load16_widened(const Source* p, __mmask16 mask) {
  __m256i values;
  if constexpr (std::is_same_v<Source, float>)
    values = __m256i(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, p)));
  else
    values = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_cvtepu16_epi32(values);
}

// 32-bit lanes holding `low` in their low halves and `high` in their high halves: two lines of
// bfloat16 values, interleaved.
QKV_BF16_INLINE __m512i interleave(__m512i low, __m512i high) {
  return _mm512_or_si512(low, _mm512_slli_epi32(high, 16));
}

}  // namespace qkv::cpu::amx
