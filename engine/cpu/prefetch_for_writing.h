// Asking for cache lines before writing them. On two cores, a line last written or read by the
// other core must be taken from it before this one writes it, and a loop that only meets its
// lines as it stores waits for them one by one; asked for ahead with PREFETCHW, the requests
// overlap the loop's arithmetic (docs/CPU_KERNELS.md, "The optimizer at two threads").
#pragma once

#include <cstdint>

namespace qkv::cpu {

// Asks for the cache lines of x[0, n) in a state that allows writing. Never faults.
template <typename T>
inline void prefetch_for_writing(const T* x, int64_t n) {
  constexpr int64_t kPerLine = 64 / int64_t(sizeof(T));
  for (int64_t i = 0; i < n; i += kPerLine) __builtin_prefetch(x + i, 1, 3);
}

}  // namespace qkv::cpu
