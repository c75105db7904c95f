// `qkv bench attention`: the attention variants across sequence lengths, time and peak memory
// each, as a table (or JSON lines) and a PNG plot.
//
//   naive    softmax(q k^T / sqrt(d)) v with the T x T scores materialized (engine matmul)
//   chunked  nn::efficient_attention: 64 x 64 tiles, online softmax, O(T d) memory
//   local    chunked with a sliding window of 128 keys: tiles outside the band are skipped
//   sparse   chunked with a block-sparse layout (64-blocks: diagonal band +-1 and one global)
//
// `qkv bench decode`: greedy decoding with and without the KV cache, and int8 vs float32 Linear
// layers at batch 1.
#pragma once

#include <string>

namespace qkv::bench {

struct AttentionBenchOptions {
  int64_t max_t = 4096;  // T = 64, 128, ... up to this
  bool json = false;     // one JSON object per variant and length instead of the table
  std::string plot = "attention_bench.png";  // empty: no picture
  std::string device = "cpu";                // cuda: train/bench/cuda_bench.h instead
};
int run_attention_bench(const AttentionBenchOptions& options);

struct DecodeBenchOptions {
  bool json = false;
};
int run_decode_bench(const DecodeBenchOptions& options);

}  // namespace qkv::bench
