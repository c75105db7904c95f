#include "train/trainer/step_profile.h"

#include <algorithm>
#include <cstdio>

#include "engine/error.h"
#include "engine/parallel.h"
#include "train/bench/bf16_peak.h"
#include "train/bench/fma_peak.h"
#include "train/bench/memory_bandwidth.h"
#include "train/profile_report.h"
#include "train/profile_timeline.h"

namespace qkv::train {

StepProfile::StepProfile(int64_t steps, int64_t warmup, int64_t first_step, int64_t last_step,
                         const Backend& memory, bool cpu, bool bf16)
    : steps_(steps),
      warmup_(warmup),
      first_profiled_(first_step + warmup),
      memory_(memory),
      cpu_(cpu),
      bf16_(bf16) {
  QKV_CHECK(steps == 0 || first_profiled_ + steps - 1 <= last_step, "--profile", steps,
            " profiled steps after ", warmup, " warm-up step", warmup == 1 ? "" : "s",
            " end at step ", first_profiled_ + steps - 1, ", after the run's last step ", last_step,
            " (raise --steps, or lower --profile or --profile-warmup)");
}

int64_t StepProfile::first_timed() const { return first_profiled_ - warmup_ / 2; }

void StepProfile::before_step(int64_t step) {
  if (steps_ == 0 || step < first_timed()) return;
  if (step == first_profiled_) {
    memory_before_ = memory_.memory_stats();
    profiler_ = std::make_unique<Profiler>();
  }
  step_start_ = std::chrono::steady_clock::now();
}

std::string allocator_line(const MemoryStats& before, const MemoryStats& after, int64_t warmup) {
  const size_t requests = after.allocations - before.allocations;
  const size_t fresh = requests - (after.cache_hits - before.cache_hits);
  if (fresh == 0)
    return "allocator: all " + std::to_string(requests) +
           " requests of the profiled steps served from its cache\n";
  return "allocator: " + std::to_string(fresh) + " of the profiled steps' " +
         std::to_string(requests) +
         " requests got new memory, whose first-touch page faults are in the times above: "
         "raise --profile-warmup (now " +
         std::to_string(warmup) + ") until none do\n";
}

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::string unprofiled_line(const std::vector<double>& warm_ms,
                            const std::vector<double>& profiled_ms, int64_t first_warm) {
  if (warm_ms.empty() || profiled_ms.empty())
    return "steps without the profiler: none timed (raise --profile-warmup to 2 or more to "
           "compare)\n";
  const double warm = median(warm_ms), profiled = median(profiled_ms);
  const int64_t last_warm = first_warm + int64_t(warm_ms.size()) - 1;
  char steps[64];
  if (first_warm == last_warm)
    std::snprintf(steps, sizeof steps, "step %lld", (long long)first_warm);
  else
    std::snprintf(steps, sizeof steps, "steps %lld..%lld", (long long)first_warm,
                  (long long)last_warm);
  char line[192];
  std::snprintf(line, sizeof line,
                "wall time per step, median: %.3f ms without the profiler (warm-up %s), %.3f ms "
                "under it (%+.1f%%)\n",
                warm, steps, profiled, 100 * (profiled / warm - 1));
  return line;
}

std::string StepProfile::after_step(int64_t step, RunDir& run) {
  if (steps_ == 0 || step < first_timed()) return "";
  const double step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start_)
          .count();
  (step < first_profiled_ ? warm_ms_ : profiled_ms_).push_back(step_ms);
  if (!profiler_ || step != first_profiled_ + steps_ - 1) return "";
  const std::vector<ProfileEvent> events = profiler_->events();
  profiler_.reset();
  const MemoryStats memory_after = memory_.memory_stats();
  // The peak and the bandwidth are measured after the profiled steps, so that their threads do
  // not run beside them.
  const int threads = num_threads();
  const ProfileSummary summary{
      .steps = int(steps_),
      .peak_gflops = cpu_ ? bench::measured_fma_peak_gflops(threads) : 0,
      .memory_gbs = cpu_ ? bench::measured_memory_gbs(threads) : 0,
      .threads = threads,
      .bf16_peak_gflops = cpu_ && bf16_ ? bench::measured_bf16_peak_gflops(threads) : 0,
      .bf16_instruction = bench::bf16_peak_instruction()};
  run.write("trace.json", chrome_trace_json(events));
  const std::string what = "steps " + std::to_string(first_profiled_) + ".." +
                           std::to_string(step) + ", " + std::to_string(threads) + " thread" +
                           (threads == 1 ? "" : "s");
  trace_timeline_png(run.file("trace.png"), events, "qkv train --profile: " + what);
  return "profile of " + what + " (times under the profiler):\n" + profile_table(events, summary) +
         allocator_line(memory_before_, memory_after, warmup_) +
         unprofiled_line(warm_ms_, profiled_ms_, first_timed()) +
         "Chrome trace: " + run.file("trace.json") +
         " (chrome://tracing or ui.perfetto.dev), drawn in " + run.file("trace.png") + "\n";
}

}  // namespace qkv::train
