#include "train/trainer/step_profile.h"

#include "engine/error.h"
#include "engine/parallel.h"
#include "train/bench/fma_peak.h"
#include "train/profile_report.h"
#include "train/profile_timeline.h"

namespace qkv::train {

StepProfile::StepProfile(int64_t steps, int64_t first_step, int64_t last_step, bool cpu)
    : steps_(steps), first_profiled_(first_step + 1), cpu_(cpu) {
  QKV_CHECK(steps == 0 || first_profiled_ + steps - 1 <= last_step, "--profile", steps,
            " steps after the warm-up step ", first_step, " end at step ",
            first_profiled_ + steps - 1, ", after the run's last step ", last_step,
            " (raise --steps or lower --profile)");
}

void StepProfile::before_step(int64_t step) {
  if (steps_ > 0 && step == first_profiled_) profiler_ = std::make_unique<Profiler>();
}

std::string StepProfile::after_step(int64_t step, RunDir& run) {
  if (!profiler_ || step != first_profiled_ + steps_ - 1) return "";
  const std::vector<ProfileEvent> events = profiler_->events();
  profiler_.reset();
  // The peak is measured after the profiled steps, so that its threads do not run beside them.
  const int threads = num_threads();
  const ProfileSummary summary{.steps = int(steps_),
                               .peak_gflops = cpu_ ? bench::measured_fma_peak_gflops(threads) : 0,
                               .threads = threads};
  run.write("trace.json", chrome_trace_json(events));
  const std::string what = "steps " + std::to_string(first_profiled_) + ".." +
                           std::to_string(step) + ", " + std::to_string(threads) + " thread" +
                           (threads == 1 ? "" : "s");
  trace_timeline_png(run.file("trace.png"), events, "qkv train --profile: " + what);
  return "profile of " + what + " (times under the profiler):\n" + profile_table(events, summary) +
         "Chrome trace: " + run.file("trace.json") +
         " (chrome://tracing or ui.perfetto.dev), drawn in " + run.file("trace.png") + "\n";
}

}  // namespace qkv::train
