// Bernoulli fills sixteen Philox blocks at a time (AVX-512F + BMI2), for CpuBackend's float32
// Bernoulli fills and dropout (engine/cpu/bernoulli_range.h): the largest random fills of a
// training step.
#pragma once

#include <cstdint>

namespace qkv::cpu {

// Whether this CPU can run fill_bernoulli_avx512.
bool bernoulli_avx512_available();

// Writes the values of the blocks first_block .. first_block + blocks - 1 (counters of
// philox::generate with `seed`, their high 64 bits `high`) as philox::bernoulli defines them:
// out[4 b + j] = value when word j of block first_block + b is below `threshold`
// (philox::bernoulli_threshold), else 0. Only whole groups of sixteen blocks are written; returns
// how many blocks were (a multiple of 16), and the caller does the rest. A sequential fill's
// counters have high 0; a line of a fill by example has its example's id there
// (philox::example_bernoulli).
int64_t fill_bernoulli_avx512(float* out, uint64_t seed, uint64_t first_block, int64_t blocks,
                              uint64_t threshold, float value, uint64_t high = 0);

// One Philox block of a fill given by itself: its 128-bit counter (counter, high) and where its
// first `count` words' values go (count 1 to 4: a line's last block may be partial).
struct PhiloxBlockAt {
  uint64_t counter, high;
  float* out;
  int count;
};

// The same values for blocks given one by one, for fills whose blocks are not consecutive
// counters (short lines of a fill by example, several lines a vector). Only whole groups of
// sixteen blocks are written; returns how many were (a multiple of 16), and the caller does the
// rest.
int64_t fill_bernoulli_blocks_avx512(const PhiloxBlockAt* blocks, int64_t count, uint64_t seed,
                                     uint64_t threshold, float value);

// The draws themselves, as bits, for blocks given by their counters alone (block b's 128-bit
// counter: counters[b] low, highs[b] high): bit 4 l + j of bits[g] is set when word j of block
// 16 g + l is below `threshold`. For masks kept as bits (the fused attention's rows of dropped
// weights), which need no float written and read again. Only whole groups of sixteen blocks;
// returns how many blocks were drawn (a multiple of 16), and the caller does the rest.
int64_t bernoulli_block_bits_avx512(const uint64_t* counters, const uint64_t* highs, int64_t count,
                                    uint64_t seed, uint64_t threshold, uint64_t* bits);

}  // namespace qkv::cpu
