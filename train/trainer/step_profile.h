// `qkv train ... --profile N`: N training steps under the profiler (engine/profiler.h), after
// --profile-warmup unprofiled steps (2 by default: the allocator's caches and the thread pool are
// cold in a run's first step, and its second still asks for sizes the first did not leave in the
// cache), reported as the per-op table of forward and backward
// (train/profile_report.h) with the MFU lines against the FMA peak measured at the end (`qkv bench
// peak`'s yardstick), printed and logged, and written into the run folder as trace.json (Chrome
// trace) and trace.png (its timeline).
//
// Two warm-up steps are not always enough: a task whose batches change shape (sequences of several
// lengths) meets new shapes for many steps, and a step that asks the caching allocator for a size
// it has not held yet gets fresh memory and pays its first-touch page faults inside the profiled
// ops. The report counts those requests, so that a table measured cold says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/profiler.h"
#include "train/run_dir.h"

namespace qkv::train {

class StepProfile {
 public:
  // Profiles steps first_step + warmup .. first_step + warmup + steps - 1 (0 steps: none) of a run
  // that ends at last_step; throws qkv::Error naming --profile when it ends before them. `memory`:
  // the backend whose allocator the report watches. `cpu`: the MFU lines compare with the CPU's
  // FMA peak (a CUDA run's table has no MFU).
  StepProfile(int64_t steps, int64_t warmup, int64_t first_step, int64_t last_step,
              const Backend& memory, bool cpu);
  // Called before step `step` runs and after it has run (its optimizer step included).
  void before_step(int64_t step);
  // Returns the report (table and the files written) after the last profiled step, else "".
  std::string after_step(int64_t step, RunDir& run);

 private:
  int64_t steps_, warmup_, first_profiled_;
  const Backend& memory_;
  bool cpu_;
  MemoryStats memory_before_;
  std::unique_ptr<Profiler> profiler_;
};

// The report's line on the allocator over the profiled steps, from its counters before and after
// them: every request served from its cache, or how many got new memory and what to do about it.
std::string allocator_line(const MemoryStats& before, const MemoryStats& after, int64_t warmup);

}  // namespace qkv::train
