// Reproducible random numbers, the same on every backend and for every thread count.
//
// The generator is counter-based (Philox-4x32-10): the n-th random number of a stream is a pure
// function of (seed, n). A kernel that fills a tensor of numel elements asks the Generator for a
// range of counters, then computes element i from counter offset + i in any order, on any thread or
// GPU, and gets the same values. The functions below compile for CUDA too.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/host_device.h"

namespace qkv {

namespace philox {

struct Block {
  uint32_t v[4];
};

QKV_HOST_DEVICE inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * b;
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// Ten rounds of Philox-4x32 on the 128-bit counter (ctr, ctr_high) with key `seed` (Salmon et
// al., SC'11).
QKV_HOST_DEVICE inline Block generate(uint64_t seed, uint64_t ctr, uint64_t ctr_high = 0) {
  uint32_t c0 = uint32_t(ctr), c1 = uint32_t(ctr >> 32), c2 = uint32_t(ctr_high),
           c3 = uint32_t(ctr_high >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 53 random bits.
QKV_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t ctr) {
  Block b = generate(seed, ctr);
  uint64_t bits = (uint64_t(b.v[0]) << 21) ^ uint64_t(b.v[1]);
  return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Bernoulli(p) draws use all four words of a block: element i of a fill that starts at counter
// `offset` is word i % 4 of block offset + i / 4, true when it is below p * 2^32 (`threshold`,
// from bernoulli_threshold). A quarter of the Philox work of one block per element, which
// matters because dropout masks are the largest random fills of a training step.
QKV_HOST_DEVICE inline uint64_t bernoulli_threshold(double p) {
  return p <= 0 ? 0 : p >= 1 ? (uint64_t(1) << 32) : uint64_t(p * 4294967296.0);
}
QKV_HOST_DEVICE inline bool bernoulli(uint64_t seed, uint64_t offset, uint64_t i,
                                      uint64_t threshold) {
  return generate(seed, offset + i / 4).v[i % 4] < threshold;
}

// Dropout masks drawn by example (engine/example_draws.h). One dropout call of a training step
// takes one counter `ctr` of the generator and draws under its own key, call_key(seed, ctr).
// Element (b, c1, c2, c3, c4) of the mask (the trailing dims right-aligned, missing ones 0, each
// below 2^16) belongs to example `example` (row b's) and is word c4 % 4 of the block at counter
// (example_position(c1, c2, c3, c4), example): a function of the example and the element's
// coordinates, not of the row the example sits in nor of the padded length of its batch.
QKV_HOST_DEVICE inline uint64_t call_key(uint64_t seed, uint64_t ctr) {
  const Block b = generate(seed, ctr);
  return (uint64_t(b.v[1]) << 32) | b.v[0];
}
constexpr int64_t kExampleDimLimit = int64_t(1) << 16;  // each trailing dim below it
constexpr int kExampleTrailingDims = 4;
QKV_HOST_DEVICE inline uint64_t example_position(uint64_t c1, uint64_t c2, uint64_t c3,
                                                 uint64_t c4) {
  return (c1 << 48) | (c2 << 32) | (c3 << 16) | (c4 >> 2);
}
QKV_HOST_DEVICE inline bool example_bernoulli(uint64_t key, uint64_t example, uint64_t c1,
                                              uint64_t c2, uint64_t c3, uint64_t c4,
                                              uint64_t threshold) {
  return generate(key, example_position(c1, c2, c3, c4), example).v[c4 & 3] < threshold;
}

// A mask's trailing dims right-aligned into four (missing ones 1): d[3] is the last dim.
struct ExampleLayout {
  uint64_t d[kExampleTrailingDims];
  QKV_HOST_DEVICE uint64_t row() const { return d[0] * d[1] * d[2] * d[3]; }
};
// Element i of a row-major mask of rows of layout `l`, row i / l.row() holding `example`.
QKV_HOST_DEVICE inline bool example_bernoulli_at(uint64_t key, const ExampleLayout& l,
                                                 uint64_t example, uint64_t i, uint64_t threshold) {
  const uint64_t c4 = i % l.d[3], c3 = i / l.d[3] % l.d[2], c2 = i / (l.d[3] * l.d[2]) % l.d[1],
                 c1 = i / (l.d[3] * l.d[2] * l.d[1]) % l.d[0];
  return example_bernoulli(key, example, c1, c2, c3, c4, threshold);
}

// Standard normal by Box-Muller from one counter's four words.
QKV_HOST_DEVICE inline double normal(uint64_t seed, uint64_t ctr) {
  Block b = generate(seed, ctr);
  double u1 = (double(b.v[0]) + 1.0) * (1.0 / 4294967297.0);  // (0, 1]
  double u2 = double(b.v[1]) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// The fills' affine maps, low + (high - low) u and mean + std z, as one fused multiply-add: a
// compiler may or may not fuse a * b + c by itself (GCC does with -march=native, nvcc does by
// default), and a fill must give the same bits on every backend and build.
QKV_HOST_DEVICE inline double uniform_between(double low, double high, double u) {
  return std::fma(high - low, u, low);
}
QKV_HOST_DEVICE inline double normal_with(double mean, double std, double z) {
  return std::fma(std, z, mean);
}

}  // namespace philox

// A seed and a running counter. Each fill takes `count` counters; the default generator is
// process-wide and seeded by manual_seed (the CLI's --seed).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  void manual_seed(uint64_t seed) { seed_ = seed, offset_ = 0; }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  // Reserves `count` counters and returns the first.
  uint64_t take(uint64_t count) {
    uint64_t first = offset_;
    offset_ += count;
    return first;
  }
  // The examples whose rows dropout is drawing, one id per row of the batch (empty: dropout
  // draws sequentially, like every other fill). Set by ExampleDraws (engine/example_draws.h).
  const std::vector<uint64_t>& example_ids() const { return example_ids_; }
  void set_example_ids(std::vector<uint64_t> ids) { example_ids_ = std::move(ids); }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  std::vector<uint64_t> example_ids_;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace qkv
