// Timing for the benchmarks: the median of several runs, which a noisy shared machine disturbs
// less than the mean or the minimum's luck. No test uses these: tests never assert on time.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace qkv::bench {

inline double median_seconds(const std::function<void()>& fn, int reps) {
  std::vector<double> times;
  for (int r = 0; r < std::max(1, reps); ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace qkv::bench
