// Stretches of a Bernoulli fill, for kernels that draw a dropout mask piece by piece.
//
// A fill that starts at counter `offset` gives element i the value philox::bernoulli(seed,
// offset, i, threshold) defines (word i % 4 of block offset + i / 4). fill_bernoulli_range writes
// elements [first, first + count) of such a fill, so a mask can be drawn where it is used - one
// row of a tile of attention scores at a time (nn/efficient_attention.cpp), a few thousand
// elements at a time by the fused dropout (engine/cpu/dropout_kernels.cpp) - and be the very mask
// a whole-tensor fill (CpuBackend::random_bernoulli, which runs on it per thread) would give.
// fill_bernoulli_example_line does the same for one line of a fill by example.
#pragma once

#include <cstdint>

#include "engine/random.h"

namespace qkv::cpu {

// out[j] = value when element first + j of the fill is drawn, else 0, for j in [0, count).
// Whole Philox blocks go sixteen at a time through AVX-512 where the CPU has it (float32).
template <typename T>
void fill_bernoulli_range(T* out, uint64_t seed, uint64_t offset, uint64_t first, int64_t count,
                          uint64_t threshold, T value);

// out[c] = value when philox::example_bernoulli(key, example, c1, c2, c3, c, threshold), else 0,
// for c in [0, width): the line (c1, c2, c3) of example `example`'s row in a fill by example
// (CpuBackend::random_bernoulli_by_example). Its blocks are consecutive counters, sixteen at a
// time through AVX-512 where the CPU has it (float32).
template <typename T>
void fill_bernoulli_example_line(T* out, uint64_t key, uint64_t example, uint64_t c1, uint64_t c2,
                                 uint64_t c3, uint64_t width, uint64_t threshold, T value);

// The same for line `line` (of width l.d[3]) of a row-major tensor of layout `l` whose row b
// (its first dim) holds example examples[b]: the line's coordinates found from its index.
template <typename T>
void fill_bernoulli_example_line_at(T* out, uint64_t key, const int64_t* examples,
                                    const philox::ExampleLayout& l, uint64_t line,
                                    uint64_t threshold, T value);

// Lines first_line .. first_line + lines - 1 of that tensor, one after the other into out (each
// l.d[3] wide). Lines too short for a vector of blocks of their own (under 64 elements, as a row
// of attention weights) are drawn several to a vector where the CPU has AVX-512 (float32).
template <typename T>
void fill_bernoulli_example_lines(T* out, uint64_t key, const int64_t* examples,
                                  const philox::ExampleLayout& l, uint64_t first_line,
                                  int64_t lines, uint64_t threshold, T value);

// The same lines' draws as bits, for lines of at most 64 elements: bit c of words[i] is set when
// element c of line first_line + i is drawn (below `threshold`), and the bits from l.d[3] up are
// 0. The fused attention keeps its rows of dropped weights so (engine/cpu/attention_kernels.cpp).
void bernoulli_example_line_words(uint64_t* words, uint64_t key, const int64_t* examples,
                                  const philox::ExampleLayout& l, uint64_t first_line,
                                  int64_t lines, uint64_t threshold);

}  // namespace qkv::cpu
