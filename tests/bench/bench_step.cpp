// Builds `bench_step`: one training step of the toy translation transformer in qkv, the same
// model and shapes as tests/bench/torch_step.py (d_model 128, 4 heads, 2+2 post-norm layers,
// feed-forward 256, dropout 0.1, batch 64, lengths 20, vocabulary 40, Adam). Prints the median
// ms/step and where the time goes (forward, backward, optimizer).
// Usage: bench_step [threads] [cpu|cuda] [dropout] [f32|bf16] [timed steps, 30] [--profile N].
// After the timed steps one more step runs under the profiler (engine/profiler.h) to count the
// model's FLOPs, printed over the median step time against the FMA peak measured now (the MFU
// line). --profile N profiles N steps instead, prints the per-op table (train/profile_report.h)
// and writes their Chrome trace to bench_step_trace.json, drawn in bench_step_trace.png. On cuda
// the device is synchronized around each timed phase (kernels run asynchronously); with dropout 0
// attention takes the fused kernel. bf16 runs the forward under Autocast (--precision bf16; on the
// CPU, AMX tiles where the CPU has them: compare with QKV_CPU_AMX=0).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/autocast.h"
#include "engine/backend.h"
#include "engine/device_loader.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "models/seq2seq.h"
#include "nn/optim.h"
#include "tests/bench/bench_step_model.h"
#include "train/bench/bf16_peak.h"
#include "train/bench/fma_peak.h"
#include "train/bench/memory_bandwidth.h"
#include "train/bench/openblas.h"
#include "train/bench/tile_ceiling.h"
#include "train/profile_report.h"
#include "train/profile_timeline.h"

using namespace qkv;

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Waits for the device's queued kernels, so a timestamp taken next covers them.
void wait_for(Device device) { backend_for(device).synchronize(); }

// The device named on the command line, or an exit code when it cannot be used.
int pick_device(const std::string& name, Device& device) {
  if (name == "cpu") return 0;
  if (name != "cuda") {
    std::fprintf(stderr, "bench_step: unknown device '%s' (cpu or cuda)\n", name.c_str());
    return 2;
  }
  if (!ensure_backend(DeviceKind::cuda)) {
    std::printf("bench_step: no GPU (%s), nothing to measure\n",
                backend_status(DeviceKind::cuda).c_str());
    return 1;
  }
  std::printf("bench_step on %s\n", backend_status(DeviceKind::cuda).c_str());
  device = Device::cuda();
  return 0;
}
}  // namespace

// Takes "--profile N" out of the arguments; returns N, 0 when absent, -1 when malformed.
int take_profile_option(int& argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--profile") != 0) continue;
    const int n = i + 1 < argc ? std::atoi(argv[i + 1]) : 0;
    if (n < 1) return -1;
    for (int j = i; j + 2 <= argc; ++j) argv[j] = argv[j + 2];
    argc -= 2;
    return n;
  }
  return 0;
}

int main(int argc, char** argv) {
  const int profile_steps = take_profile_option(argc, argv);
  if (profile_steps < 0) {
    std::fprintf(stderr, "bench_step: --profile takes a step count of at least 1\n");
    return 2;
  }
  set_num_threads(argc > 1 ? std::atoi(argv[1]) : 2);
  Device device = Device::cpu();
  if (int rc = pick_device(argc > 2 ? argv[2] : "cpu", device)) return rc;
  const double dropout = argc > 3 ? std::atof(argv[3]) : 0.1;
  const std::string precision = argc > 4 ? argv[4] : "f32";
  if (precision != "f32" && precision != "bf16") {
    std::fprintf(stderr, "bench_step: unknown precision '%s' (f32 or bf16)\n", precision.c_str());
    return 2;
  }
  const DType compute_dtype = precision == "bf16" ? DType::bf16 : DType::f32;
  // Fewer timed steps (and as few warm-up steps) only for tests/gpu/tables_test.sh, which checks
  // the output's format, under the sanitizers too.
  const int timed_steps = argc > 5 ? std::atoi(argv[5]) : 30;
  if (timed_steps < 1) {
    std::fprintf(stderr, "bench_step: timed steps must be at least 1, got '%s'\n", argv[5]);
    return 2;
  }
  const int warm_up = std::min(5, timed_steps);
  const int64_t len = bench::kStepLength, vocab = bench::kStepVocab, pad = bench::kStepPad;
  manual_seed(0);
  const models::Seq2SeqConfig cfg = bench::step_model_config(dropout);
  models::Seq2SeqTransformer model(cfg);
  model.to(device);
  model.train();
  nn::Adam opt(model.parameters(), 1e-3);

  const bench::StepBatch step_batch = bench::step_batch();
  Tensor src = step_batch.source.to(device), tgt = step_batch.target.to(device);
  Tensor tgt_in = narrow(tgt, 1, 0, len), tgt_out = contiguous(narrow(tgt, 1, 1, len));
  Tensor src_mask = eq(src, double(pad)), tgt_mask = eq(tgt_in, double(pad));

  // One step; returns the milliseconds of its forward, backward and optimizer phases.
  auto step = [&]() -> std::vector<double> {
    wait_for(device);
    auto t0 = Clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      ProfileScope phase("forward", ProfilePhase::forward);
      Autocast autocast(compute_dtype);  // backward replays each product in its forward's dtype
      Tensor logits = model.forward(src, tgt_in, src_mask, tgt_mask);
      loss = cross_entropy(reshape(logits, {-1, vocab}), reshape(tgt_out, {-1}), pad);
    }
    wait_for(device);
    const double f = ms_since(t0);
    auto t1 = Clock::now();
    loss.backward();  // a "backward" scope of its own
    wait_for(device);
    const double b = ms_since(t1);
    auto t2 = Clock::now();
    {
      ProfileScope phase("optimizer", ProfilePhase::optimizer);
      opt.step();
    }
    wait_for(device);
    return {f, b, ms_since(t2)};
  };

  std::vector<double> total, fwd, bwd, upd;
  Backend& memory = backend_for(device);
  for (int it = 0; it < warm_up + timed_steps; ++it) {
    if (it == warm_up) memory.reset_peak_memory();  // the timed steps' peak, caches warm
    auto t0 = Clock::now();
    std::vector<double> phases = step();
    if (it < warm_up) continue;  // allocator caches, thread pool
    fwd.push_back(phases[0]), bwd.push_back(phases[1]), upd.push_back(phases[2]);
    total.push_back(ms_since(t0));
  }
  std::printf("qkv threads %d device %s dropout %g precision %s\n", num_threads(),
              device.str().c_str(), dropout, precision.c_str());
  std::printf("forward %.2f  backward %.2f  adam %.2f (medians, ms)\n", median(fwd), median(bwd),
              median(upd));
  std::printf("ms/step %.2f (best %.2f)\n", median(total),
              *std::min_element(total.begin(), total.end()));
  std::printf("peak memory %.1f MiB (the allocator's bytes in use, timed steps)\n",
              double(memory.memory_stats().peak_bytes) / (1 << 20));

  // The model's FLOPs, counted by the profiler from the ops' shapes over profiled steps (their
  // times are the profiler's; the MFU line divides by the unprofiled median above).
  std::vector<ProfileEvent> events;
  {
    Profiler profiler;
    for (int i = 0; i < std::max(1, profile_steps); ++i) step();
    events = profiler.events();
  }
  double flops[3] = {0, 0, 0};
  for (const ProfileEvent& e : events)
    if (!e.scope && e.thread == 0 && e.phase != ProfilePhase::other) flops[int(e.phase)] += e.flops;
  const int steps = std::max(1, profile_steps);
  const double step_flops = (flops[0] + flops[1] + flops[2]) / steps;
  std::printf(
      "model FLOPs %.3f GFLOP/step (forward %.3f, backward %.3f, counted from the ops' "
      "shapes)\n",
      step_flops * 1e-9, flops[0] / steps * 1e-9, flops[1] / steps * 1e-9);
  if (device.is_cpu()) {
    const double peak = bench::measured_fma_peak_gflops(num_threads());
    auto mfu = [&](double phase_flops, double ms) {
      return 100 * phase_flops / (ms * 1e-3) * 1e-9 / peak;
    };
    std::printf(
        "MFU %.1f%% of the float32 FMA peak %.1f GFLOP/s at %d thread%s (measured now), at "
        "the median times: forward %.1f%%, backward %.1f%%, optimizer %.1f%%\n",
        mfu(step_flops, median(total)), peak, num_threads(), num_threads() == 1 ? "" : "s",
        mfu(flops[0] / steps, median(fwd)), mfu(flops[1] / steps, median(bwd)),
        mfu(flops[2] / steps, median(upd)));
    // and against the most its products could reach: the GEMM's tile with nothing to wait for
    const bench::TileCeiling tile = bench::measured_tile_ceiling(num_threads());
    std::printf(
        "%.1f%% of the GEMM tile's rate %.1f GFLOP/s (%s on its panels in L1, measured now: "
        "%.1f%% of the FMA peak)\n",
        100 * step_flops / (median(total) * 1e-3) * 1e-9 / tile.gflops, tile.gflops,
        tile.kernel.c_str(), 100 * tile.gflops / peak);
    // a bf16 step also against the peak of the instruction its products run on
    const double bf16_peak =
        compute_dtype == DType::bf16 ? bench::measured_bf16_peak_gflops(num_threads()) : 0;
    if (bf16_peak > 0)
      std::printf("%.1f%% of the %s peak %.1f GFLOP/s at %d thread%s (measured now)\n",
                  100 * step_flops / (median(total) * 1e-3) * 1e-9 / bf16_peak,
                  bench::bf16_peak_instruction(), bf16_peak, num_threads(),
                  num_threads() == 1 ? "" : "s");
    if (profile_steps > 0) {
      train::ProfileSummary summary{.steps = steps,
                                    .peak_gflops = peak,
                                    .memory_gbs = bench::measured_memory_gbs(num_threads()),
                                    .threads = num_threads(),
                                    .bf16_peak_gflops = bf16_peak,
                                    .bf16_instruction = bench::bf16_peak_instruction()};
      std::printf("\nprofile of %d step%s (times under the profiler):\n%s", steps,
                  steps == 1 ? "" : "s", train::profile_table(events, summary).c_str());
      std::ofstream("bench_step_trace.json") << train::chrome_trace_json(events);
      train::trace_timeline_png("bench_step_trace.png", events,
                                "bench_step: " + std::to_string(steps) + " profiled step" +
                                    (steps == 1 ? "" : "s") + ", " + std::to_string(num_threads()) +
                                    " thread" + (num_threads() == 1 ? "" : "s"));
      std::printf(
          "Chrome trace: bench_step_trace.json (chrome://tracing or ui.perfetto.dev), "
          "drawn in bench_step_trace.png\n");
    }
    // The OpenBLAS kernel a fair PyTorch comparison runs (compare_step.sh reads this line):
    // PyTorch's CPU matmuls go through the same library.
    const bench::OpenBlas& blas = bench::OpenBlas::get();
    if (blas.available())
      std::printf("openblas_coretype %s (%s)\n", blas.core_name().c_str(),
                  blas.kernel_choice().c_str());
  }
  return 0;
}
