// How every peak `qkv bench` measures is taken: the same rate on every thread of the pool at
// once, added up, so that the threads share the cores as a training step's threads do.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/parallel.h"

namespace qkv::bench {

// rate() (FLOP/s of one thread) run by each of `threads` pool threads at the same time, one chunk
// each, and the rates summed; the pool's size is restored afterwards.
template <typename Rate>
double summed_over_threads(int threads, Rate rate) {
  std::vector<double> per_thread(static_cast<size_t>(threads), 0.0);
  const int saved = num_threads();
  set_num_threads(threads);
  parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) per_thread[size_t(t)] = rate();
  });
  set_num_threads(saved);
  double total = 0;
  for (double r : per_thread) total += r;
  return total;
}

}  // namespace qkv::bench
