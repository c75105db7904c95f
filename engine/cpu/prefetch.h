// Asking for cache lines before the loop that meets them.
//
// For writing: on two cores, a line last written or read by the other core must be taken from it
// before this one writes it, and a loop that only meets its lines as it stores waits for them one
// by one; asked for ahead with PREFETCHW, the requests overlap the loop's arithmetic
// (docs/CPU_KERNELS.md, "The optimizer at two threads"). Lines in no cache at all (a gradient's
// rows written into memory last used long before) are asked for a row ahead the same way.
//
// For reading: the walks over a middle axis (CBAM's pooling over channels and its gradient) read
// an image's rows in memory order, yet ran at half the speed of a plain read of the same bytes
// from memory; each row asking for the next one's lines as it starts brings them to that speed
// (docs/CPU_KERNELS.md, "The pools over channels, read ahead").
#pragma once

#include <cstdint>

namespace qkv::cpu {

// Asks for the cache lines of x[0, n), for writing (kWrite 1) or reading (0). Never faults, so x
// may run past an allocation.
template <int kWrite, typename T>
inline void prefetch_lines(const T* x, int64_t n) {
  constexpr int64_t kPerLine = 64 / int64_t(sizeof(T));
  for (int64_t i = 0; i < n; i += kPerLine) __builtin_prefetch(x + i, kWrite, 3);
}

// In a state that allows writing (PREFETCHW).
template <typename T>
inline void prefetch_for_writing(const T* x, int64_t n) {
  prefetch_lines<1>(x, n);
}

template <typename T>
inline void prefetch_for_reading(const T* x, int64_t n) {
  prefetch_lines<0>(x, n);
}

}  // namespace qkv::cpu
