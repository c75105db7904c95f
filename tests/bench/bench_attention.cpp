// Builds `bench_attention`: attention variants across sequence lengths, KV-cache decoding, and
// INT8 vs fp32 Linear. Every number is measured in this run; nothing is asserted.
//
//   naive    softmax(q k^T / sqrt(d)) v with the T x T scores materialized (engine matmul)
//   chunked  nn::efficient_attention: 64 x 64 tiles, online softmax, O(T d) memory
//   local    chunked with a sliding window of 128 keys: tiles outside the band are skipped
//   sparse   chunked with a block-sparse layout (64-blocks: diagonal band +-1 and one global)
//
// Flags: --quick (T up to 1024).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>

#include "engine/backend.h"
#include "models/seq2seq.h"
#include "nn/efficient_attention.h"
#include "nn/int8_gemm.h"
#include "nn/quantized.h"

using namespace qkv;

namespace {

double seconds_of(const std::function<void()>& fn, int reps) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];  // median
}

// Peak bytes above those in use before fn.
size_t peak_of(const std::function<void()>& fn) {
  Backend& cpu = backend_for(Device::cpu());
  size_t base = cpu.memory_stats().bytes_in_use;
  cpu.reset_peak_memory();
  fn();
  return cpu.memory_stats().peak_bytes - base;
}

void attention_table(bool quick) {
  NoGrad no_grad;
  std::printf("attention forward, batch 1, 4 heads, d = 64, float32 (median time, peak memory)\n");
  std::printf("%6s | %10s %10s | %10s %10s | %10s %10s | %10s %10s | %9s %9s\n", "T", "naive ms",
              "naive MiB", "chunk ms", "chunk MiB", "local ms", "local MiB", "sparse ms",
              "sparse MiB", "mem ratio", "time x");
  for (int64_t T = 64; T <= (quick ? 1024 : 4096); T *= 2) {
    Tensor q = randn({1, 4, T, 64}), k = randn({1, 4, T, 64}), v = randn({1, 4, T, 64});
    nn::AttentionPattern local, sparse;
    local.window = 128;
    sparse.block_size = 64;
    sparse.block_layout = nn::band_block_layout(T, T, 64, 1, 1);
    std::vector<std::function<void()>> variants{
        [&] { nn::scaled_dot_product_attention(q, k, v); },
        [&] { nn::efficient_attention(q, k, v); },
        [&] { nn::efficient_attention(q, k, v, {}, local); },
        [&] { nn::efficient_attention(q, k, v, {}, sparse); }};
    const int reps = T <= 512 ? 9 : T <= 2048 ? 3 : 2;
    double ms[4];
    double mib[4];
    for (size_t i = 0; i < 4; ++i) {
      variants[i]();  // warm the allocator's cache and the pool
      ms[i] = 1e3 * seconds_of(variants[i], reps);
      mib[i] = double(peak_of(variants[i])) / (1 << 20);
    }
    std::printf(
        "%6lld | %10.2f %10.2f | %10.2f %10.2f | %10.2f %10.2f | %10.2f %10.2f | %9.1f %9.2f\n",
        (long long)T, ms[0], mib[0], ms[1], mib[1], ms[2], mib[2], ms[3], mib[3], mib[0] / mib[1],
        ms[1] / ms[0]);
  }
  std::printf(
      "mem ratio = naive / chunked peak (target >= 8 at T = 4096); time x = chunked / "
      "naive time (target <= 1.5)\n\n");
}

void kv_cache_bench() {
  models::Seq2SeqConfig c{.src_vocab = 32,
                          .tgt_vocab = 32,
                          .d_model = 128,
                          .num_heads = 4,
                          .num_encoder_layers = 2,
                          .num_decoder_layers = 2,
                          .dim_feedforward = 512,
                          .dropout = 0.0,
                          .max_len = 128};
  models::Seq2SeqTransformer model(c);
  model.eval();
  std::vector<int64_t> ids(24);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 3 + int64_t(i % 20);
  Tensor src = tensor_i64(ids, {1, 24});
  // eos = -1 never occurs: exactly 64 tokens are generated.
  auto run = [&](bool cache) {
    model.use_kv_cache = cache;
    return seconds_of([&] { model.greedy_decode(src, Tensor(), 1, -1, 64); }, 3);
  };
  run(true);
  double cached = run(true), full = run(false);
  model.use_kv_cache = true;
  Tensor a = model.greedy_decode(src, Tensor(), 1, -1, 64);
  model.use_kv_cache = false;
  Tensor b = model.greedy_decode(src, Tensor(), 1, -1, 64);
  bool same = a.to_vector<int64_t>() == b.to_vector<int64_t>();
  std::printf("greedy decoding of 64 tokens (d = 128, 2+2 layers, batch 1)\n");
  std::printf(
      "  recompute prefix %8.2f ms   KV cache %8.2f ms   speedup %.1fx (target >= 5)   "
      "same tokens: %s\n\n",
      1e3 * full, 1e3 * cached, full / cached, same ? "yes" : "NO");
}

void int8_bench() {
  NoGrad no_grad;
  std::printf("Linear at batch 1: fp32 vs int8 (%s)\n",
              nn::cpu_has_vnni() ? "AVX-512 VNNI" : "portable kernel");
  std::printf("%12s | %9s %9s %7s | %9s %7s\n", "in -> out", "fp32 us", "int8 us", "speedup",
              "portable", "speedup");
  for (auto [in, out] : {std::pair<int64_t, int64_t>{256, 256},
                         {512, 2048},
                         {1024, 1024},
                         {2048, 2048},
                         {4096, 1024}}) {
    nn::Linear fp(in, out);
    nn::QuantizedLinear q8(fp);
    Tensor x = randn({1, in});
    const int reps = 301;
    double t_fp = seconds_of([&] { fp.forward(x); }, reps);
    double t_q8 = seconds_of([&] { q8.forward(x); }, reps);
    q8.use_vnni = false;
    double t_pt = seconds_of([&] { q8.forward(x); }, reps);
    std::printf("%5lld->%-5lld | %9.1f %9.1f %6.2fx | %9.1f %6.2fx\n", (long long)in,
                (long long)out, 1e6 * t_fp, 1e6 * t_q8, t_fp / t_q8, 1e6 * t_pt, t_fp / t_pt);
  }
  std::printf("(target: int8 >= 1.5x faster than fp32)\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && !std::strcmp(argv[1], "--quick");
  manual_seed(0);
  attention_table(quick);
  kv_cache_bench();
  int8_bench();
  return 0;
}
