// What a file of AVX-512 kernels needs (and the mask of a ragged vector they all use): such a file
// is compiled into every build (no -march) and its functions carry the target attribute, called
// only after cpuid says the CPU has AVX-512F.
//
// GCC 12's AVX-512 intrinsics (min, max, conversions, shifts, reductions, masked loads) pass a
// self-initialized "undefined" vector as their unused merge operand, which -Wmaybe-uninitialized
// reports wherever they are inlined (GCC bug 105593, fixed in GCC 13); nothing in these files
// reads an uninitialized value, so the warning is off in the files that include this header.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "engine/cpu/prefetch.h"

#if !defined(__clang__)  // a GCC-only warning; clang would warn about the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define QKV_AVX512 __attribute__((target("avx512f")))
#define QKV_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline

namespace qkv::cpu {

// Lanes [0, n) of a vector of 16 floats (none for n <= 0, all for n >= 16): a row's ragged end.
QKV_AVX512_INLINE __mmask16 lanes_below(int64_t n) {
  return n <= 0 ? __mmask16(0) : n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
}

// Lanes [lo, hi) of a vector (lo may be negative, hi past 16): a row's part inside [0, W) seen
// from a vector that starts before or ends after it.
QKV_AVX512_INLINE __mmask16 lanes_between(int64_t lo, int64_t hi) {
  return __mmask16(lanes_below(hi) & ~lanes_below(lo));
}

// Asks for the line 1 KB past p. Masked loads that miss the caches get no help from the hardware
// prefetcher (on Zen 5, a stride-2 padding copy reading its input from memory through them ran at
// a third of the speed of the same loop with plain loads, and at nearly that speed with this
// prefetch), so a loop that streams rows from memory through masked loads prefetches its own
// input. A prefetch never faults: one past the end of an array is harmless. (Plain streams ask
// the same way on some CPUs: prefetch.h's prefetch_line_ahead and prefetch_stream_block.)
QKV_AVX512_INLINE void prefetch_ahead(const float* p) { prefetch_line_ahead<0>(p); }

}  // namespace qkv::cpu
