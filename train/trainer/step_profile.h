// `qkv train ... --profile N`: N training steps under the profiler (engine/profiler.h), after one
// unprofiled warm-up step (the allocator's caches and the thread pool are cold in a run's first
// step), reported as the per-op table of forward and backward (train/profile_report.h) with the
// MFU lines against the FMA peak measured at the end (`qkv bench peak`'s yardstick), printed and
// logged, and written into the run folder as trace.json (Chrome trace) and trace.png (its
// timeline).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/profiler.h"
#include "train/run_dir.h"

namespace qkv::train {

class StepProfile {
 public:
  // Profiles steps first_step + 1 .. first_step + steps (0 steps: none) of a run that ends at
  // last_step; throws qkv::Error naming --profile when it ends before them. `cpu`: the MFU lines
  // compare with the CPU's FMA peak (a CUDA run's table has no MFU).
  StepProfile(int64_t steps, int64_t first_step, int64_t last_step, bool cpu);
  // Called before step `step` runs and after it has run (its optimizer step included).
  void before_step(int64_t step);
  // Returns the report (table and the files written) after the last profiled step, else "".
  std::string after_step(int64_t step, RunDir& run);

 private:
  int64_t steps_, first_profiled_;
  bool cpu_;
  std::unique_ptr<Profiler> profiler_;
};

}  // namespace qkv::train
