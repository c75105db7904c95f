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

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/profiler.h"
#include "train/run_dir.h"

namespace qkv::train {

class StepProfile {
 public:
  // Profiles steps first_step + warmup .. first_step + warmup + steps - 1 (0 steps: none) of a run
  // that ends at last_step; throws qkv::Error naming --profile when it ends before them. `memory`:
  // the backend whose allocator the report watches. `cpu`: the MFU lines compare with the CPU's
  // FMA peak (a CUDA run's table has no MFU), and for a `bf16` run (--precision bf16) also with
  // the peak of the bfloat16 instruction its products run on.
  StepProfile(int64_t steps, int64_t warmup, int64_t first_step, int64_t last_step,
              const Backend& memory, bool cpu, bool bf16);
  // Called before step `step` runs and after it has run (its optimizer step included).
  void before_step(int64_t step);
  // Returns the report (table and the files written) after the last profiled step, else "".
  std::string after_step(int64_t step, RunDir& run);

 private:
  int64_t first_timed() const;  // the first warm-up step whose wall time is kept
  int64_t steps_, warmup_, first_profiled_;
  const Backend& memory_;
  bool cpu_, bf16_;
  MemoryStats memory_before_;
  std::unique_ptr<Profiler> profiler_;
  // Each step's wall time from before_step to after_step: the second half of the warm-up steps
  // (the first half meets cold caches) without the profiler, then the profiled steps.
  std::chrono::steady_clock::time_point step_start_;
  std::vector<double> warm_ms_, profiled_ms_;
};

// The report's line on the allocator over the profiled steps, from its counters before and after
// them: every request served from its cache, or how many got new memory and what to do about it.
std::string allocator_line(const MemoryStats& before, const MemoryStats& after, int64_t warmup);

// The report's line on the profiler's own cost: the median wall time of the unprofiled warm-up
// steps `first_warm`.. (ms each) against the profiled steps'. The per-op records cost a few
// microseconds an op on the issuing thread, which the other threads wait out, so a table's step
// time and thread speed-up are read beside this line.
std::string unprofiled_line(const std::vector<double>& warm_ms,
                            const std::vector<double>& profiled_ms, int64_t first_warm);

}  // namespace qkv::train
