// Bernoulli fills with Philox-4x32-10, sixteen counters a vector, two vectors at a time (AVX-512).
//
// The numbers are engine/random.h's, bit for bit: lane l of a vector holds one 32-bit word of the
// block for counter base + l, and each round is the scalar round on sixteen lanes. What the
// compiler could not find by itself in the scalar loop (it vectorized at 8 lanes and stored the
// results one float at a time) is the 32 x 32 -> 64-bit multiply of all sixteen lanes, and the
// store of the 64 results in element order: word j of block l is element 4 l + j, so the four
// comparison masks are interleaved bit by bit (PDEP) into one 64-bit mask, and four masked
// moves write 64 floats.
//
// The functions carry target attributes instead of relying on -march: this file is compiled into
// every build and only called after cpuid says the CPU has AVX-512F and BMI2.
#include "engine/cpu/bernoulli_avx512.h"

#include <immintrin.h>

#include "engine/cpu/avx512_target.h"

namespace qkv::cpu {

bool bernoulli_avx512_available() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("bmi2");
}

namespace {

#define QKV_AVX512_BMI2 __attribute__((target("avx512f,bmi2")))
#define QKV_AVX512_BMI2_INLINE __attribute__((target("avx512f,bmi2"), always_inline)) inline

// The high and low 32 bits of a * m on each of the sixteen lanes (m the same on all). VPMULUDQ
// multiplies the even lanes (the low halves of 64-bit pairs) into 64-bit products; the odd lanes
// are swapped into even places and multiplied apart. The halves go back to their lanes by
// swapping the two words of each pair under a mask (VPSHUFD, which runs beside the multiplies;
// 64-bit shifts would compete with them for one port).
QKV_AVX512_BMI2_INLINE void mulhilo(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
  constexpr _MM_PERM_ENUM kSwapPairs = _MM_PERM_CDAB;
  constexpr __mmask16 kOddLanes = 0xAAAA, kEvenLanes = 0x5555;
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_shuffle_epi32(a, kSwapPairs), m);
  lo = _mm512_mask_shuffle_epi32(even, kOddLanes, odd, kSwapPairs);
  hi = _mm512_mask_shuffle_epi32(odd, kEvenLanes, even, kSwapPairs);
}

// x ^ y ^ z in one instruction (truth table 0x96).
QKV_AVX512_BMI2_INLINE __m512i xor3(__m512i x, __m512i y, __m512i z) {
  return _mm512_ternarylogic_epi32(x, y, z, 0x96);
}

// The ten rounds on G groups of sixteen counters (c0..c3: the counter's four words on each lane),
// leaving the blocks' words in words[g][0..3]. One group's rounds are a chain of dependent
// multiplies (about 11 cycles a round), so G independent groups are interleaved round by round to
// keep the multiplier busy: two groups run in nearly the time of one.
template <int G>
QKV_AVX512_BMI2_INLINE void philox_rounds(uint64_t seed, __m512i c0[G], __m512i c1[G],
                                          __m512i c2[G], __m512i c3[G], __m512i words[G][4]) {
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  const __m512i m0 = _mm512_set1_epi32(int(0xD2511F53u)), m1 = _mm512_set1_epi32(int(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi32(int(k0)), key1 = _mm512_set1_epi32(int(k1));
    for (int g = 0; g < G; ++g) {
      __m512i hi0, lo0, hi1, lo1;
      mulhilo(c0[g], m0, hi0, lo0);
      mulhilo(c2[g], m1, hi1, lo1);
      c0[g] = xor3(hi1, c1[g], key0);
      c1[g] = lo1;
      c2[g] = xor3(hi0, c3[g], key1);
      c3[g] = lo0;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int g = 0; g < G; ++g)
    words[g][0] = c0[g], words[g][1] = c1[g], words[g][2] = c2[g], words[g][3] = c3[g];
}

// philox::generate on the 16 G counters first .. first + 16 G - 1 (high 64 bits `high`);
// words[g][j] holds word j of counters first + 16 g .. first + 16 g + 15.
template <int G>
QKV_AVX512_BMI2_INLINE void philox16(uint64_t seed, uint64_t first, uint64_t high,
                                     __m512i words[G][4]) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i c0[G], c1[G], c2[G], c3[G];
  for (int g = 0; g < G; ++g) {
    const uint64_t group_first = first + uint64_t(16 * g);
    const __m512i first_lo = _mm512_set1_epi32(int(uint32_t(group_first)));
    c0[g] = _mm512_add_epi32(first_lo, lane);
    // the low word wrapped around on these lanes: their high word is one more
    const __mmask16 carry = _mm512_cmplt_epu32_mask(c0[g], first_lo);
    const __m512i first_hi = _mm512_set1_epi32(int(uint32_t(group_first >> 32)));
    c1[g] = _mm512_mask_add_epi32(first_hi, carry, first_hi, _mm512_set1_epi32(1));
    c2[g] = _mm512_set1_epi32(int(uint32_t(high)));
    c3[g] = _mm512_set1_epi32(int(uint32_t(high >> 32)));
  }
  philox_rounds<G>(seed, c0, c1, c2, c3, words);
}

// philox::generate on G groups of sixteen counters given one by one: lane l of group g is block
// 16 g + l of `blocks` (its counter and high 64 bits).
template <int G>
QKV_AVX512_BMI2_INLINE void philox16_given(uint64_t seed, const PhiloxBlockAt* blocks,
                                           __m512i words[G][4]) {
  __m512i c0[G], c1[G], c2[G], c3[G];
  for (int g = 0; g < G; ++g) {
    alignas(64) uint32_t w[4][16];
    for (int l = 0; l < 16; ++l) {
      const PhiloxBlockAt& b = blocks[16 * g + l];
      w[0][l] = uint32_t(b.counter), w[1][l] = uint32_t(b.counter >> 32);
      w[2][l] = uint32_t(b.high), w[3][l] = uint32_t(b.high >> 32);
    }
    c0[g] = _mm512_load_si512(w[0]), c1[g] = _mm512_load_si512(w[1]);
    c2[g] = _mm512_load_si512(w[2]), c3[g] = _mm512_load_si512(w[3]);
  }
  philox_rounds<G>(seed, c0, c1, c2, c3, words);
}

// philox::generate on G groups of sixteen counters read from two arrays: lane l of group g is
// counter 16 g + l, its low 64 bits from `counters` and its high 64 from `highs`. VPMOVQD keeps
// the low word of each 64-bit value, so eight values give eight lanes of one word of the counter.
template <int G>
QKV_AVX512_BMI2_INLINE void philox16_arrays(uint64_t seed, const uint64_t* counters,
                                            const uint64_t* highs, __m512i words[G][4]) {
  // the low and the high words of sixteen 64-bit values, sixteen lanes each
  const auto words_of = [](const uint64_t* values, __m512i& low, __m512i& high) {
    const __m512i a = _mm512_loadu_si512(values), b = _mm512_loadu_si512(values + 8);
    low = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(a)),
                             _mm512_cvtepi64_epi32(b), 1);
    high =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(_mm512_srli_epi64(a, 32))),
                           _mm512_cvtepi64_epi32(_mm512_srli_epi64(b, 32)), 1);
  };
  __m512i c0[G], c1[G], c2[G], c3[G];
  for (int g = 0; g < G; ++g) {
    words_of(counters + 16 * g, c0[g], c1[g]);
    words_of(highs + 16 * g, c2[g], c3[g]);
  }
  philox_rounds<G>(seed, c0, c1, c2, c3, words);
}

// Bit 4 l + j: whether word j of lane l's block is below the threshold t (all set when `always`).
QKV_AVX512_BMI2_INLINE uint64_t kept_bits(const __m512i words[4], bool always, __m512i t) {
  if (always) return ~uint64_t(0);
  uint64_t kept = 0;
  for (int j = 0; j < 4; ++j) {
    const uint64_t below = _mm512_cmplt_epu32_mask(words[j], t);
    kept |= _pdep_u64(below, 0x1111111111111111ull << j);
  }
  return kept;
}

// Writes the 64 G values of blocks first .. first + 16 G - 1 to out.
template <int G>
QKV_AVX512_BMI2_INLINE void fill_groups(float* out, uint64_t seed, uint64_t first, uint64_t high,
                                        bool always, __m512i t, __m512 v) {
  __m512i words[G][4];
  philox16<G>(seed, first, high, words);
  for (int g = 0; g < G; ++g) {
    const uint64_t kept = kept_bits(words[g], always, t);
    float* o = out + 64 * g;
    for (int r = 0; r < 4; ++r)
      _mm512_storeu_ps(o + 16 * r, _mm512_maskz_mov_ps(__mmask16(kept >> (16 * r)), v));
  }
}

// Writes each of the 16 G given blocks' first `count` words' values to its `out`.
template <int G>
QKV_AVX512_BMI2_INLINE void fill_given_groups(const PhiloxBlockAt* blocks, uint64_t seed,
                                              bool always, __m512i t, float value) {
  __m512i words[G][4];
  philox16_given<G>(seed, blocks, words);
  for (int g = 0; g < G; ++g) {
    const uint64_t kept = kept_bits(words[g], always, t);
    for (int l = 0; l < 16; ++l) {
      const PhiloxBlockAt& b = blocks[16 * g + l];
      for (int j = 0; j < b.count; ++j) b.out[j] = (kept >> (4 * l + j)) & 1 ? value : 0.0f;
    }
  }
}

// The kept bits of the 16 G blocks whose counters start at counters[0] and highs[0].
template <int G>
QKV_AVX512_BMI2_INLINE void block_bits(const uint64_t* counters, const uint64_t* highs,
                                       uint64_t seed, bool always, __m512i t, uint64_t* bits) {
  __m512i words[G][4];
  philox16_arrays<G>(seed, counters, highs, words);
  for (int g = 0; g < G; ++g) bits[g] = kept_bits(words[g], always, t);
}

}  // namespace

QKV_AVX512_BMI2 int64_t bernoulli_block_bits_avx512(const uint64_t* counters, const uint64_t* highs,
                                                    int64_t count, uint64_t seed,
                                                    uint64_t threshold, uint64_t* bits) {
  const int64_t whole = count / 16 * 16;
  const bool always = threshold > 0xFFFFFFFFu;
  const __m512i t = _mm512_set1_epi32(int(uint32_t(always ? 0 : threshold)));
  int64_t b = 0;
  for (; b + 32 <= whole; b += 32)
    block_bits<2>(counters + b, highs + b, seed, always, t, bits + b / 16);
  if (b < whole) block_bits<1>(counters + b, highs + b, seed, always, t, bits + b / 16);
  return whole;
}

QKV_AVX512_BMI2 int64_t fill_bernoulli_blocks_avx512(const PhiloxBlockAt* blocks, int64_t count,
                                                     uint64_t seed, uint64_t threshold,
                                                     float value) {
  const int64_t whole = count / 16 * 16;
  const bool always = threshold > 0xFFFFFFFFu;
  const __m512i t = _mm512_set1_epi32(int(uint32_t(always ? 0 : threshold)));
  int64_t b = 0;
  for (; b + 32 <= whole; b += 32) fill_given_groups<2>(blocks + b, seed, always, t, value);
  if (b < whole) fill_given_groups<1>(blocks + b, seed, always, t, value);
  return whole;
}

QKV_AVX512_BMI2 int64_t fill_bernoulli_avx512(float* out, uint64_t seed, uint64_t first_block,
                                              int64_t blocks, uint64_t threshold, float value,
                                              uint64_t high) {
  const int64_t whole = blocks / 16 * 16;
  const __m512 v = _mm512_set1_ps(value);
  // threshold is at most 2^32 (p = 1): then every word is below it
  const bool always = threshold > 0xFFFFFFFFu;
  const __m512i t = _mm512_set1_epi32(int(uint32_t(always ? 0 : threshold)));
  int64_t b = 0;
  for (; b + 32 <= whole; b += 32)
    fill_groups<2>(out + 4 * b, seed, first_block + uint64_t(b), high, always, t, v);
  if (b < whole) fill_groups<1>(out + 4 * b, seed, first_block + uint64_t(b), high, always, t, v);
  return whole;
}

}  // namespace qkv::cpu
