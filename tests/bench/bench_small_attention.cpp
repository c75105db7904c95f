// Builds `bench_small_attention`: the CPU's attention kernel alone on the toy translation step's
// problems ([64 batch, 4 heads, T = S = 20, d = 32], heads read in place from [B, T, H, d]), its
// forward and backward called through the backend as nn::efficient_attention calls them, for the
// step's three kinds of call: causal self-attention with key padding, key padding alone, each
// with attention dropout 0.1 (key padding also with the dropout drawn by example, as the trainer
// draws it), and a plain one without; as in training (the forward keeps what
// the backward needs), and again without (marked -: the backward recomputes). Prints the fastest of
// several batches of calls, in us per call and per (batch, head) problem, and GFLOP/s (2 per
// multiply-add: two products forward, five backward). Usage: bench_small_attention [threads, 1] [T,
// 20] [d, 32].
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "engine/attention_problem.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "engine/random.h"
#include "train/bench/timing.h"

using namespace qkv;

namespace {

// Seconds per call of fn with the caches holding other data: the median of 40 calls, each after
// 16 MB have been written.
double cold_seconds_per_call(const std::function<void()>& fn) {
  static std::vector<float> other(size_t(4) << 20);
  std::vector<double> times;
  for (int rep = 0; rep < 40; ++rep) {
    for (size_t i = 0; i < other.size(); i += 16) other[i] += 1;
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int64_t T = argc > 2 ? std::atoll(argv[2]) : 20, d = argc > 3 ? std::atoll(argv[3]) : 32;
  const bool cold = argc > 4 && std::string(argv[4]) == "cold";
  const int64_t B = 64, H = 4, S = T;
  set_num_threads(threads);
  manual_seed(1);
  NoGrad no_grad;
  auto heads = [&](int64_t L) { return randn({B, L, H, d}).transpose(1, 2); };
  const Tensor q = heads(T), k = heads(S), v = heads(S), gy = heads(T);
  // Key padding: batch entry b pads its last b % 5 keys.
  std::vector<double> pad(size_t(B * S), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = S - b % 5; s < S; ++s) pad[size_t(b * S + s)] = 1;
  const Tensor padding = tensor(pad, {B, 1, 1, S}).to(DType::b8);
  Backend& cpu = backend_for(Device::cpu());
  struct Kind {
    const char* name;
    bool causal, padded;
    double dropout;
    bool kept;        // the forward keeps what the backward needs
    bool by_example;  // dropout drawn by example, as the trainer draws it (engine/example_draws.h)
  };
  const double flops_forward = 2.0 * double(B * H * T * S * (d + d));
  const double flops_backward = 2.0 * double(B * H * T * S * (3 * d + 2 * d));
  std::printf("attention kernel, [%lld, %lld, %lld, %lld] float32, %d thread(s)%s\n", (long long)B,
              (long long)H, (long long)T, (long long)d, threads, cold ? ", cold caches" : "");
  std::printf("%-26s %12s %12s %10s | %12s %12s %10s\n", "call", "forward us", "us/problem",
              "GFLOP/s", "backward us", "us/problem", "GFLOP/s");
  for (const Kind kind : {Kind{"causal + padding, p 0.1", true, true, 0.1, true, false},
                          Kind{"padding, p 0.1", false, true, 0.1, true, false},
                          Kind{"padding, p 0.1, by example", false, true, 0.1, true, true},
                          Kind{"plain", false, false, 0, true, false},
                          Kind{"causal + padding, p 0.1, -", true, true, 0.1, false, false},
                          Kind{"plain, -", false, false, 0, false, false}}) {
    AttentionProblem p;
    p.q = q, p.k = k, p.v = v;
    if (kind.padded) p.masks.push_back(padding);
    p.pattern.causal = kind.causal;
    p.scale = 1 / std::sqrt(double(d));
    p.dropout.p = kind.dropout, p.dropout.seed = 5;
    if (kind.by_example) {  // example b's id 1000 + b, under a call's key as nn's attention draws
      std::vector<int64_t> ids(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) ids[size_t(b)] = 1000 + b;
      p.dropout.examples = tensor_i64(ids, {B});
      p.dropout.key = philox::call_key(5, 0);
    }
    p.backward_expected = kind.kept;  // as nn::efficient_attention says when a graph is recorded
    AttentionForward f = cpu.attention_forward(p);
    auto seconds = [&](const std::function<void()>& fn) {
      return cold ? cold_seconds_per_call(fn) : bench::fastest_seconds_per_call(fn, 0.3);
    };
    const double fwd = seconds([&] { f = cpu.attention_forward(p); });
    const double bwd = seconds([&] { cpu.attention_backward(p, f, gy, {}); });
    const double problems = double(B * H);
    std::printf("%-26s %12.1f %12.3f %10.1f | %12.1f %12.3f %10.1f\n", kind.name, fwd * 1e6,
                fwd * 1e6 / problems, flops_forward / fwd * 1e-9, bwd * 1e6, bwd * 1e6 / problems,
                flops_backward / bwd * 1e-9);
  }
  return 0;
}
