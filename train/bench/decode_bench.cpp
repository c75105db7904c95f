// `qkv bench decode` (declared in attention_bench.h): what incremental decoding and int8 weights
// save at inference time, each measured beside its reference in the same run.
#include <cstdio>
#include <vector>

#include "engine/ops.h"
#include "engine/parallel.h"
#include "models/seq2seq.h"
#include "nn/int8_gemm.h"
#include "nn/quantized.h"
#include "train/bench/attention_bench.h"
#include "train/bench/timing.h"

namespace qkv::bench {

namespace {

// Greedy decoding and beam search of 64 tokens by the toy translation model's shape, recomputing
// the whole prefix every step versus feeding one token through the KV cache; the tokens must be
// identical.
void kv_cache_bench(bool json) {
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
  auto decode = [&](bool cache) {
    model.use_kv_cache = cache;
    return model.greedy_decode(src, Tensor(), 1, /*eos never produced*/ -1, 64);
  };
  const bool same =
      decode(true).to_vector<int64_t>() == decode(false).to_vector<int64_t>();  // also warms up
  const double cached = median_seconds([&] { decode(true); }, 5);
  const double full = median_seconds([&] { decode(false); }, 5);
  // Beam search of width 4: the cache's rows follow the hypotheses kept.
  auto search = [&](bool cache) {
    model.use_kv_cache = cache;
    return model.beam_search(src, Tensor(), 1, -1, 64, 4);
  };
  const bool beam_same = search(true).to_vector<int64_t>() == search(false).to_vector<int64_t>();
  const double beam_cached = median_seconds([&] { search(true); }, 3);
  const double beam_full = median_seconds([&] { search(false); }, 3);
  model.use_kv_cache = true;
  auto report = [&](const char* name, double full_s, double cached_s, bool same_tokens) {
    if (json)
      std::printf(
          "{\"bench\":\"kv_cache\",\"search\":\"%s\",\"tokens\":64,\"threads\":%d,"
          "\"recompute_ms\":%.3f,\"cached_ms\":%.3f,\"speedup\":%.3f,\"same_tokens\":%s}\n",
          name, num_threads(), 1e3 * full_s, 1e3 * cached_s, full_s / cached_s,
          same_tokens ? "true" : "false");
    else
      std::printf(
          "  %-7s recompute prefix %8.2f ms   KV cache %8.2f ms   speedup %4.1fx   same tokens: "
          "%s\n",
          name, 1e3 * full_s, 1e3 * cached_s, full_s / cached_s, same_tokens ? "yes" : "NO");
  };
  if (!json)
    std::printf("decoding 64 tokens (d = 128, 2+2 layers, batch 1, %d threads; target >= 5x)\n",
                num_threads());
  report("greedy", full, cached, same);
  report("beam 4", beam_full, beam_cached, beam_same);
  if (!json) std::printf("\n");
}

// One Linear at batch 1, float32 against int8 (VNNI when the CPU has it, and the portable
// kernel for comparison).
void int8_bench(bool json) {
  NoGrad no_grad;
  if (!json) {
    std::printf("Linear at batch 1: float32 vs int8 (%s)\n",
                nn::cpu_has_vnni() ? "AVX-512 VNNI" : "portable kernel");
    std::printf("%12s | %9s %9s %7s | %9s %7s\n", "in -> out", "fp32 us", "int8 us", "speedup",
                "portable", "speedup");
  }
  const std::pair<int64_t, int64_t> shapes[] = {
      {256, 256}, {512, 2048}, {1024, 1024}, {2048, 2048}, {4096, 1024}};
  for (auto [in, out] : shapes) {
    nn::Linear fp(in, out);
    nn::QuantizedLinear q8(fp);
    Tensor x = randn({1, in});
    const int reps = 301;
    const double t_fp = median_seconds([&] { fp.forward(x); }, reps);
    const double t_q8 = median_seconds([&] { q8.forward(x); }, reps);
    q8.use_vnni = false;
    const double t_pt = median_seconds([&] { q8.forward(x); }, reps);
    if (json)
      std::printf(
          "{\"bench\":\"int8_linear\",\"in\":%lld,\"out\":%lld,\"fp32_us\":%.2f,\"int8_us\":%.2f,"
          "\"portable_us\":%.2f}\n",
          (long long)in, (long long)out, 1e6 * t_fp, 1e6 * t_q8, 1e6 * t_pt);
    else
      std::printf("%5lld->%-5lld | %9.1f %9.1f %6.2fx | %9.1f %6.2fx\n", (long long)in,
                  (long long)out, 1e6 * t_fp, 1e6 * t_q8, t_fp / t_q8, 1e6 * t_pt, t_fp / t_pt);
  }
  if (!json) std::printf("(target: int8 >= 1.5x faster than float32)\n");
}

}  // namespace

int run_decode_bench(const DecodeBenchOptions& options) {
  manual_seed(0);
  kv_cache_bench(options.json);
  int8_bench(options.json);
  return 0;
}

}  // namespace qkv::bench
