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

// For streams (a loop over a contiguous run, a block of kStreamBlock elements at a time): asks for
// the lines 1 KB past elements [j0, j1) of x, for reading (kWrite 0) or writing (1). The hardware
// prefetchers alone give a plain stream about three quarters of what it gets with this on the
// Intel CPU with AMX of docs/CPU_KERNELS.md ("BatchNorm's streams asked for ahead").
//
// A run's last block asks for up to 1 KB past the run: the next run's first lines, which is what
// keeps a broadcast's short rows (784 values) streaming; stopping at the run's end lost most of
// the gain. For writing, past a thread's chunk those are the next chunk's first 16 lines, which
// its thread wrote first, long before this one reaches its chunk's end (parallel_for's chunks are
// contiguous, one a thread): at most those lines move once, after their writer is done with them.
constexpr int64_t kStreamBlock = 64;
constexpr int64_t kStreamAhead = 1024;  // bytes: how far ahead a stream asks
template <int kWrite, typename T>
inline void prefetch_stream_block(const T* x, int64_t j0, int64_t j1) {
  const char* end = reinterpret_cast<const char*>(x + j1) + kStreamAhead;
  for (const char* p = reinterpret_cast<const char*>(x + j0) + kStreamAhead; p < end; p += 64)
    __builtin_prefetch(p, kWrite, 3);
}

// The one line kStreamAhead bytes past p, for a loop that streams a vector (a line) at a time.
template <int kWrite, typename T>
inline void prefetch_line_ahead(const T* p) {
  __builtin_prefetch(reinterpret_cast<const char*>(p) + kStreamAhead, kWrite, 3);
}

// Bytes to ask for: to be read, into L2 (which holds a next image of the CNN's, 50 KB, beside the
// present one's planes without evicting them), or to be written, into L1 in a writable state.
struct PrefetchRange {
  const void* start = nullptr;
  int64_t bytes = 0;
  bool write = false;
};

// The lines of the next piece of work (the next image's input, its output's lines for writing),
// asked for a share at a time while the present piece computes. Met only when the next piece
// starts, they stall its first loads and stores one line-fetch after another with the core idle;
// a share asked for after each tile of the present piece overlaps the fetches with its
// arithmetic (docs/CPU_KERNELS.md, "The next image asked for during this one").
class PrefetchAhead {
 public:
  PrefetchAhead() = default;  // nothing to ask for
  explicit PrefetchAhead(PrefetchRange a, PrefetchRange b = {}) : ranges_{a, b} {}

  // Asks for each range's lines up to the fraction done / total of it (0 < total).
  void up_to(int64_t done, int64_t total) {
    for (int r = 0; r < 2; ++r) {
      const PrefetchRange& range = ranges_[r];
      const char* start = static_cast<const char*>(range.start);
      const int64_t end = range.bytes * done / total;
      for (; asked_[r] < end; asked_[r] += 64)
        if (range.write)
          __builtin_prefetch(start + asked_[r], 1, 3);
        else
          __builtin_prefetch(start + asked_[r], 0, 2);
    }
  }

 private:
  PrefetchRange ranges_[2];
  int64_t asked_[2] = {0, 0};
};

}  // namespace qkv::cpu
