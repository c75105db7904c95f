// Builds `bench_step`: one training step of the toy translation transformer in qkv, the same
// model and shapes as tests/bench/torch_step.py (d_model 128, 4 heads, 2+2 post-norm layers,
// feed-forward 256, dropout 0.1, batch 64, lengths 20, vocabulary 40, Adam). Prints the median
// ms/step and where the time goes (forward, backward, optimizer).
// Usage: bench_step [threads] [cpu|cuda] [dropout] [f32|bf16] [timed steps, 30]. On cuda the
// device is synchronized around each timed phase (kernels run asynchronously); with dropout 0
// attention takes the fused kernel. bf16 runs the forward under Autocast (--precision bf16; on the
// CPU, AMX tiles where the CPU has them: compare with QKV_CPU_AMX=0).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/autocast.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "models/seq2seq.h"
#include "nn/optim.h"
#include "train/bench/fma_peak.h"
#include "train/bench/openblas.h"

#ifdef QKV_WITH_CUDA
#include "cuda/cuda_backend.h"
#endif

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
void wait_for(Device device) {
#ifdef QKV_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize();
#else
  (void)device;
#endif
}

// The device named on the command line, or an exit code when it cannot be used.
int pick_device(const std::string& name, Device& device) {
  if (name == "cpu") return 0;
  if (name != "cuda") {
    std::fprintf(stderr, "bench_step: unknown device '%s' (cpu or cuda)\n", name.c_str());
    return 2;
  }
#ifdef QKV_WITH_CUDA
  if (!cuda::init()) {
    std::printf("bench_step: no GPU (%s), nothing to measure\n", cuda::status().c_str());
    return 1;
  }
  std::printf("bench_step on %s\n", cuda::status().c_str());
  device = Device::cuda();
  return 0;
#else
  (void)device;
  std::fprintf(stderr, "bench_step: built without CUDA\n");
  return 2;
#endif
}
}  // namespace

int main(int argc, char** argv) {
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
  const int64_t batch = 64, len = 20, vocab = 40, pad = 0;
  manual_seed(0);
  models::Seq2SeqConfig cfg{.src_vocab = vocab,
                            .tgt_vocab = vocab,
                            .d_model = 128,
                            .num_heads = 4,
                            .num_encoder_layers = 2,
                            .num_decoder_layers = 2,
                            .dim_feedforward = 256,
                            .dropout = dropout,
                            .pad_id = pad};
  models::Seq2SeqTransformer model(cfg);
  model.to(device);
  model.train();
  nn::Adam opt(model.parameters(), 1e-3);

  // random tokens in [1, vocab), the last 3 source positions padding (as in torch_step.py)
  Generator gen(1);
  auto tokens = [&](int64_t n) {
    std::vector<int64_t> ids;
    for (double v : uniform({n}, 1, double(vocab), {DType::f64}, &gen).to_vector<double>())
      ids.push_back(int64_t(v));
    return ids;
  };
  std::vector<int64_t> s = tokens(batch * len);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = len - 3; t < len; ++t) s[size_t(b * len + t)] = pad;
  Tensor src = tensor_i64(s, {batch, len}).to(device);
  Tensor tgt = tensor_i64(tokens(batch * (len + 1)), {batch, len + 1}).to(device);
  Tensor tgt_in = narrow(tgt, 1, 0, len), tgt_out = contiguous(narrow(tgt, 1, 1, len));
  Tensor src_mask = eq(src, double(pad)), tgt_mask = eq(tgt_in, double(pad));

  std::vector<double> total, fwd, bwd, upd;
  Backend& memory = backend_for(device);
  for (int it = 0; it < warm_up + timed_steps; ++it) {
    if (it == warm_up) memory.reset_peak_memory();  // the timed steps' peak, caches warm
    wait_for(device);
    auto t0 = Clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      Autocast autocast(compute_dtype);  // backward replays each product in its forward's dtype
      Tensor logits = model.forward(src, tgt_in, src_mask, tgt_mask);
      loss = cross_entropy(reshape(logits, {-1, vocab}), reshape(tgt_out, {-1}), pad);
    }
    wait_for(device);
    const double f = ms_since(t0);
    auto t1 = Clock::now();
    loss.backward();
    wait_for(device);
    const double b = ms_since(t1);
    auto t2 = Clock::now();
    opt.step();
    wait_for(device);
    const double u = ms_since(t2);
    if (it < warm_up) continue;  // allocator caches, thread pool
    fwd.push_back(f), bwd.push_back(b), upd.push_back(u), total.push_back(ms_since(t0));
  }
  std::printf("qkv threads %d device %s dropout %g precision %s\n", num_threads(),
              device.str().c_str(), dropout, precision.c_str());
  std::printf("forward %.2f  backward %.2f  adam %.2f (medians, ms)\n", median(fwd), median(bwd),
              median(upd));
  std::printf("ms/step %.2f (best %.2f)\n", median(total),
              *std::min_element(total.begin(), total.end()));
  std::printf("peak memory %.1f MiB (the allocator's bytes in use, timed steps)\n",
              double(memory.memory_stats().peak_bytes) / (1 << 20));
  if (device.is_cpu()) {
    std::printf("float32 FMA peak at %d thread%s: %.1f GFLOP/s (qkv bench peak, measured now)\n",
                num_threads(), num_threads() == 1 ? "" : "s",
                bench::measured_fma_peak_gflops(num_threads()));
    // The OpenBLAS kernel a fair PyTorch comparison runs (compare_step.sh reads this line):
    // PyTorch's CPU matmuls go through the same library.
    const bench::OpenBlas& blas = bench::OpenBlas::get();
    if (blas.available())
      std::printf("openblas_coretype %s (%s)\n", blas.core_name().c_str(),
                  blas.kernel_choice().c_str());
  }
  return 0;
}
