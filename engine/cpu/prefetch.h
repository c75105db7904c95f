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

#include <algorithm>
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
// asked for while the present piece computes: a line every few iterations of its arithmetic
// (ask_one), or a share after each of its tiles (up_to). Met only when the next piece starts,
// they stall its first loads and stores one line-fetch after another with the core idle
// (docs/CPU_KERNELS.md, "The next image asked for during this one").
class PrefetchAhead {
 public:
  PrefetchAhead() = default;  // nothing to ask for
  explicit PrefetchAhead(PrefetchRange a, PrefetchRange b = {})
      : ranges_{a, b}, goal_{a.bytes, b.bytes} {}

  // Asks for each range's lines up to the fraction done / total of it (0 < total).
  void up_to(int64_t done, int64_t total) {
    for (int r = 0; r < 2; ++r)
      for (const int64_t end = ranges_[r].bytes * done / total; asked_[r] < end;) ask(r);
  }

  // Asks for one more line, the two ranges in turn, until both are asked for: for a loop to call
  // every few iterations of its arithmetic. A share of a few dozen lines asked back to back (up_to
  // after a tile) holds the core up until the line-fill buffers take them, each waiting out a
  // fetch from memory; a line at a time overlaps them with the arithmetic (docs/CPU_KERNELS.md,
  // "The next image's lines asked for one at a time").
  void ask_one() {
    const int r = asked_[turn_] < goal_[turn_] ? turn_ : turn_ ^ 1;
    if (asked_[r] < goal_[r]) ask(r);
    turn_ ^= 1;
  }

  // Limits ask_one to the fraction done / total of each range (0 < total): each tile of a piece
  // sets the goal to the share up to its end, and asks for the lines to it spread over its loop
  // (lines_each, ask_lines).
  void pace(int64_t done, int64_t total) {
    for (int r = 0; r < 2; ++r) goal_[r] = ranges_[r].bytes * done / total;
  }
  int64_t lines_left() const {
    int64_t lines = 0;
    for (int r = 0; r < 2; ++r) lines += std::max<int64_t>(0, goal_[r] - asked_[r] + 63) / 64;
    return lines;
  }
  // The lines to ask for at each of `steps` points of a loop to reach the goal (0 < steps).
  int64_t lines_each(int64_t steps) const { return (lines_left() + steps - 1) / steps; }
  void ask_lines(int64_t n) {
    for (; n > 0; --n) ask_one();
  }
  bool empty() const { return ranges_[0].bytes == 0 && ranges_[1].bytes == 0; }

 private:
  void ask(int r) {
    const char* line = static_cast<const char*>(ranges_[r].start) + asked_[r];
    if (ranges_[r].write)
      __builtin_prefetch(line, 1, 3);
    else
      __builtin_prefetch(line, 0, 2);
    asked_[r] += 64;
  }

  PrefetchRange ranges_[2];
  int64_t goal_[2] = {0, 0};  // ask_one's limit: all of each range, unless paced
  int64_t asked_[2] = {0, 0};
  int turn_ = 0;
};

}  // namespace qkv::cpu
