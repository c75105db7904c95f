// `qkv bench ops`: bandwidth of the memory-bound kernels (softmax, layer_norm, GELU, Adam) in
// GB/s, beside a plain copy of the same bytes measured in the same run - the ceiling they chase.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "train/commands/commands.h"

namespace qkv::cli {

namespace {

// Best of several repetitions (the machines are shared: the minimum is the least disturbed).
double best_seconds(const std::function<void()>& fn, int reps = 7) {
  fn();  // warm up: caches, the allocator's free lists, the thread pool
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int bench_ops_command(const OpsBenchOptions& options) {
  // 8M floats = 32 MiB per tensor: far larger than any cache here
  const int64_t rows = 8192, cols = 1024, n = rows * cols;
  const double bytes = double(n) * 4;
  manual_seed(0);
  Tensor x = randn({rows, cols});
  Tensor out = Tensor::empty({rows, cols});
  Tensor w = ones({cols}), b = zeros({cols});
  Tensor mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  Tensor p = randn({n}), g = randn({n}), m = zeros({n}), v = zeros({n});
  Tensor gy = g.reshape({rows, cols}), derivative = Tensor::empty({rows, cols});
  Backend& cpu = x.backend();
  NoGrad no_grad;

  struct Row {
    const char* name;
    double moved;  // bytes read + written
    std::function<void()> run;
  };
  std::vector<Row> rows_to_run = {
      {"copy", 2 * bytes, [&] { cpu.copy(x, out); }},
      {"softmax", 2 * bytes, [&] { cpu.softmax(x, out, false); }},
      {"layer_norm", 2 * bytes, [&] { cpu.layer_norm(x, w, b, 1e-5, out, mean, rstd); }},
      {"gelu", 2 * bytes, [&] { cpu.unary(UnaryOp::gelu_erf, x, out, 0); }},
      // gelu's backward, gy * gelu'(x): one pass, and the two it replaced (gelu' written, then
      // read back by mul), both counted by the bytes the one pass moves, so the rates compare times
      {"gelu_bwd", 3 * bytes, [&] { cpu.binary(BinaryOp::gelu_erf_backward, gy, x, out); }},
      {"gelu_bwd x2", 3 * bytes,
       [&] {
         cpu.unary(UnaryOp::gelu_erf_grad, x, derivative, 0);
         cpu.binary(BinaryOp::mul, gy, derivative, out);
       }},
      {"adam", 7 * bytes,  // reads p, g, m, v; writes p, m, v
       [&] { cpu.adam_step(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, false, 10); }},
  };
  double copy_gbs = 0;
  if (!options.json)
    std::printf("%-12s %10s %10s   (%d threads, %lld floats per tensor)\n", "kernel", "GB/s",
                "vs copy", num_threads(), (long long)n);
  for (const Row& r : rows_to_run) {
    double gbs = r.moved / best_seconds(r.run) / 1e9;
    if (std::string(r.name) == "copy") copy_gbs = gbs;
    if (options.json)
      std::printf("%s\n", nlohmann::json({{"kernel", r.name},
                                          {"gbps", gbs},
                                          {"copy_gbps", copy_gbs},
                                          {"ratio", gbs / copy_gbs},
                                          {"threads", num_threads()}})
                              .dump()
                              .c_str());
    else
      std::printf("%-12s %10.1f %9.0f%%\n", r.name, gbs, 100 * gbs / copy_gbs);
  }
  return 0;
}

}  // namespace qkv::cli
