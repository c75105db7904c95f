#include "train/bench/core_handoff.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/parallel.h"

namespace qkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Runs side(0) on the issuing thread and side(1) on the pool's first worker, in one job.
template <typename Side>
void on_both_threads(Side&& side) {
  parallel_for(0, 2, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) side(int(i));
  });
}

// The median of a run of timings (reordered in place).
double median_of(std::vector<double>& times) {
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// The sum of the block, with independent lanes so that the adds are not the limit.
float read_block(const float* x, int64_t n) {
  float lanes[16] = {};
  for (int64_t i = 0; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += x[i + j];
  float total = 0;
  for (float lane : lanes) total += lane;
  return total;
}

}  // namespace

std::optional<RoundTrip> measured_round_trip(int64_t exchanges) {
  if (num_threads() < 2) return std::nullopt;
  // The line the two ends pass back and forth: odd values are the issuing thread's serves, even
  // ones the worker's returns.
  alignas(64) std::atomic<int64_t> ball{0};
  std::thread::id ends[2];  // read after the job, which orders them
  std::vector<double> medians;
  RoundTrip result;
  for (int round = 0; round < 5; ++round) {
    ball.store(0);
    std::vector<double> times;
    times.reserve(size_t(exchanges));
    on_both_threads([&](int side) {
      ends[side] = std::this_thread::get_id();
      if (side == 1) {
        for (int64_t i = 0; i < exchanges; ++i) {
          while (ball.load(std::memory_order_acquire) != 2 * i + 1) _mm_pause();
          ball.store(2 * i + 2, std::memory_order_release);
        }
        return;
      }
      for (int64_t i = 0; i < exchanges; ++i) {
        const auto t0 = Clock::now();
        ball.store(2 * i + 1, std::memory_order_release);
        while (ball.load(std::memory_order_acquire) != 2 * i + 2) _mm_pause();
        times.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
      }
    });
    medians.push_back(median_of(times));
    result.exchanges += exchanges;
  }
  result.ns = *std::min_element(medians.begin(), medians.end());
  result.crossed = ends[0] != ends[1];
  return result;
}

std::optional<HandoffRead> measured_handoff_read(int64_t bytes, int rounds) {
  if (num_threads() < 2) return std::nullopt;
  const int64_t n = std::max<int64_t>(bytes / int64_t(sizeof(float)), 16);
  std::vector<float> block(size_t(n), 1.0f);
  float sink = 0;
  // Writer `side` fills the block, then the issuing thread reads it: the time of the read alone.
  auto read_after = [&](int writer) {
    on_both_threads([&](int side) {
      if (side == writer)
        for (int64_t i = 0; i < n; ++i) block[size_t(i)] += 1.0f;
    });
    const auto t0 = Clock::now();
    sink += read_block(block.data(), n);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return double(n) * sizeof(float) / seconds * 1e-9;
  };
  HandoffRead best;
  for (int round = 0; round < rounds; ++round) {
    best.own_gbs = std::max(best.own_gbs, read_after(0));
    best.other_gbs = std::max(best.other_gbs, read_after(1));
  }
  volatile float keep = sink;  // the reads must not be dropped
  (void)keep;
  return best;
}

std::optional<ThreadSpeeds> measured_thread_speeds(int64_t floats, int rounds) {
  if (num_threads() < 2) return std::nullopt;
  Tensor x = randn({floats}), out = Tensor::empty({floats});
  Backend& cpu = x.backend();
  std::vector<double> times[2];
  for (int round = 0; round < rounds; ++round)
    for (int runner = 0; runner < 2; ++runner)
      on_both_threads([&](int side) {
        if (side != runner) return;
        // Inside the pool's job the kernel runs on this thread alone (nested calls run inline).
        const auto t0 = Clock::now();
        cpu.unary(UnaryOp::gelu_erf, x, out, 0);
        times[side].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      });
  if (times[0].empty() || times[1].empty()) return std::nullopt;  // a side that never ran
  return ThreadSpeeds{median_of(times[0]), median_of(times[1]), int64_t(times[0].size()),
                      int64_t(times[1].size())};
}

}  // namespace qkv::bench
