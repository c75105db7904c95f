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

// Seconds per call of fn for the GEMM benchmarks: warm up once, then repeat batches of calls for
// about `budget` seconds and keep the fastest batch (noise from other processes only ever makes a
// run slower).
inline double fastest_seconds_per_call(const std::function<void()>& fn, double budget) {
  using clock = std::chrono::steady_clock;
  auto elapsed = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  auto t0 = clock::now();
  fn();
  const double first = std::max(elapsed(t0), 1e-7);
  const int calls = std::max(1, int(0.02 / first));  // batches of >= 20 ms hide the clock's cost
  double best = first;
  auto start = clock::now();
  for (int rep = 0; rep < 3 || elapsed(start) < budget; ++rep) {
    auto t = clock::now();
    for (int i = 0; i < calls; ++i) fn();
    best = std::min(best, elapsed(t) / calls);
    if (rep >= 50) break;
  }
  return best;
}

}  // namespace qkv::bench
