// Waiting for another thread by spinning, before sleeping: how the thread pool's workers wait for
// the next kernel and the issuing thread for the workers' chunks (engine/parallel.cpp).
#pragma once

#include <immintrin.h>

#include <chrono>

namespace qkv {

// How long a thread spins before it sleeps. A training step issues thousands of small kernels
// back to back, and waking a sleeping thread takes 25 us to milliseconds on the VMs measured,
// longer than many kernels run (docs/CPU_KERNELS.md, "The pool's threads spin for a time"). A
// time, not a count of `pause`s: a pause took 11 ns on one CPU measured and 18 ns on another (its
// length is each CPU's own choice), so a count would give each CPU its own window.
inline constexpr std::chrono::microseconds kSpinTime{200};

// Pauses until done() or `limit` has passed, and returns done(): true as soon as it holds, false
// no sooner than `limit` after the call. The clock is read every 16 pauses, well under a
// microsecond apart, and not at all when there is nothing to wait for: the issuing thread calls
// this after every parallel_for.
template <typename Done>
bool spin_until(Done done, std::chrono::microseconds limit = kSpinTime) {
  if (done()) return true;
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (done()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() >= end) return done();
  }
}

}  // namespace qkv
