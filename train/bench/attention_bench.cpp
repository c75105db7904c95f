#include "train/bench/attention_bench.h"

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "nn/attention.h"
#include "nn/efficient_attention.h"
#include "train/bench/cuda_bench.h"
#include "train/bench/timing.h"
#include "train/canvas.h"
#include "train/plots.h"

namespace qkv::bench {

namespace {

// Peak bytes allocated above those in use before fn ran.
size_t peak_bytes_of(const std::function<void()>& fn) {
  Backend& cpu = backend_for(Device::cpu());
  const size_t base = cpu.memory_stats().bytes_in_use;
  cpu.reset_peak_memory();
  fn();
  return cpu.memory_stats().peak_bytes - base;
}

struct Variant {
  const char* name;
  std::function<void(const Tensor&, const Tensor&, const Tensor&)> run;
};

std::vector<Variant> variants(int64_t T) {
  nn::AttentionPattern local, sparse;
  local.window = 128;
  sparse.block_size = 64;
  sparse.block_layout = nn::band_block_layout(T, T, 64, 1, 1);
  return {
      {"naive", [](auto& q, auto& k, auto& v) { nn::scaled_dot_product_attention(q, k, v); }},
      {"chunked", [](auto& q, auto& k, auto& v) { nn::efficient_attention(q, k, v); }},
      {"local",
       [local](auto& q, auto& k, auto& v) { nn::efficient_attention(q, k, v, {}, local); }},
      {"sparse",
       [sparse](auto& q, auto& k, auto& v) { nn::efficient_attention(q, k, v, {}, sparse); }},
  };
}

}  // namespace

int run_attention_bench(const AttentionBenchOptions& options) {
  if (options.device != "cpu") return run_cuda_attention_bench(options.device);
  QKV_CHECK(options.max_t >= 64, "bench attention", "--max-t must be at least 64, got ",
            options.max_t);
  NoGrad no_grad;
  manual_seed(0);
  const std::vector<std::string> names = {"naive", "chunked", "local", "sparse"};
  std::vector<train::Series> time_series, memory_series;
  for (const auto& n : names)
    time_series.push_back({n, {}, {}}), memory_series.push_back({n, {}, {}});
  if (!options.json) {
    std::printf(
        "attention forward, batch 1, 4 heads, d = 64, float32 (median time, peak memory)\n");
    std::printf("%6s |", "T");
    for (const auto& n : names) std::printf(" %8s ms %7s MiB |", n.c_str(), n.c_str());
    std::printf(" %9s %9s\n", "mem ratio", "time x");
  }
  double last_ratio = 0, last_time_x = 0;
  for (int64_t T = 64; T <= options.max_t; T *= 2) {
    Tensor q = randn({1, 4, T, 64}), k = randn({1, 4, T, 64}), v = randn({1, 4, T, 64});
    const int reps = T <= 512 ? 9 : T <= 2048 ? 3 : 2;
    std::vector<double> ms, mib;
    for (const Variant& variant : variants(T)) {
      auto once = [&] { variant.run(q, k, v); };
      once();  // warm the allocator's cache and the thread pool
      ms.push_back(1e3 * median_seconds(once, reps));
      mib.push_back(double(peak_bytes_of(once)) / (1 << 20));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      time_series[i].x.push_back(double(T)), time_series[i].y.push_back(ms[i]);
      memory_series[i].x.push_back(double(T)), memory_series[i].y.push_back(mib[i]);
      if (options.json)
        std::printf("{\"t\":%lld,\"variant\":\"%s\",\"ms\":%.4f,\"peak_mib\":%.4f}\n", (long long)T,
                    names[i].c_str(), ms[i], mib[i]);
    }
    last_ratio = mib[0] / mib[1], last_time_x = ms[1] / ms[0];
    if (!options.json) {
      std::printf("%6lld |", (long long)T);
      for (size_t i = 0; i < names.size(); ++i) std::printf(" %11.2f %11.2f |", ms[i], mib[i]);
      std::printf(" %9.1f %9.2f\n", last_ratio, last_time_x);
    }
  }
  if (!options.json)
    std::printf(
        "mem ratio = naive / chunked peak memory, time x = chunked / naive time (targets at T = "
        "4096: ratio >= 8, time x <= 1.5)\n");
  if (!options.plot.empty()) {
    train::PlotOptions o;
    o.x_label = "sequence length T";
    o.log_x = o.log_y = true;
    o.title = "attention forward: time";
    o.y_label = "ms";
    train::Image left = train::line_plot(time_series, o);
    o.title = "attention forward: peak memory";
    o.y_label = "MiB";
    train::Image right = train::line_plot(memory_series, o);
    train::Image both(left.width + right.width, left.height);
    train::blit(both, left, 0, 0);
    train::blit(both, right, left.width, 0);
    train::write_png(options.plot, both);
    if (!options.json) std::printf("plot: %s\n", options.plot.c_str());
  }
  return 0;
}

}  // namespace qkv::bench
