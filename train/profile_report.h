// What a profile (engine/profiler.h) tells a person: the per-op table of where the steps' time
// went, the model FLOPs utilisation of each phase, and a Chrome trace of every thread.
#pragma once

#include <string>
#include <vector>

#include "engine/profiler.h"

namespace qkv::train {

struct ProfileSummary {
  int steps = 1;           // how many training steps the events cover (averages per step)
  double peak_gflops = 0;  // the float32 FMA peak at this thread count, measured; 0 = unknown
  double memory_gbs = 0;   // main memory's bandwidth at this thread count, measured; 0 = unknown
  int threads = 1;         // the thread count the steps ran at
  int shapes_per_op = 2;   // how many of the costliest shapes each row names
  // A bfloat16 run's: its instruction's peak at this thread count, measured (bench/bf16_peak.h),
  // and the instruction's name; 0 = not a bfloat16 run, or no bfloat16 instruction
  double bf16_peak_gflops = 0;
  const char* bf16_instruction = "";
};

// The table, one row per (phase, op) on the issuing thread, costliest first:
//   phase     op                 calls   total ms  % step  GFLOP/s   GB/s  costliest shapes
// then one line per phase with its time, GFLOP and utilisation of the peak (the MFU line; a
// bfloat16 run's also against its instruction's peak), one for
// the ops that only move data (bytes but no FLOPs: their time, bytes and rate against the
// measured memory bandwidth, the bound on them once their tensors outgrow the caches), and how
// busy each pool worker was.
std::string profile_table(const std::vector<ProfileEvent>& events, const ProfileSummary& summary);

// The trace in the Trace Event Format that chrome://tracing and https://ui.perfetto.dev open: one
// complete ("X") event per op, backward rule, scope and worker chunk, one track per thread.
std::string chrome_trace_json(const std::vector<ProfileEvent>& events);

}  // namespace qkv::train
