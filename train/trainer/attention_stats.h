// Numbers that say whether attention is healthy, per layer (`--trace`, docs/TRAINING.md).
//
// From one batch's recorded attention (models/attention_maps.h): the shapes of Q, K and V; the
// range of the raw scores q.k and of the scaled ones q.k / sqrt(d) (too large a range saturates
// the softmax); the range of the softmax row sums (1 up to rounding, or a mask is wrong); and
// the row entropy -sum p log p in nats, next to log(keys), the entropy of uniform attention
// (near 0: each query looks at one key; near log(keys): it looks at nothing in particular).
// Padded queries and keys are left out, as are keys a mask removed (weight exactly 0).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "models/attention_maps.h"
#include "train/run_dir.h"

namespace qkv::train {

struct AttentionLayerStats {
  std::string name;  // "encoder.0.self", ...
  Shape q, k, v;     // [B, H, L, head_dim]
  double raw_min = 0, raw_max = 0, scaled_min = 0, scaled_max = 0;
  double row_sum_min = 0, row_sum_max = 0;
  double entropy_mean = 0, entropy_min = 0, entropy_max = 0;  // nats, over heads and rows
  double uniform_entropy = 0;  // mean over rows of log(number of keys the row may attend to)
};

// query_pad [B, T] and key_pad [B, S]: bool, true = padding; undefined = none.
AttentionLayerStats attention_layer_stats(const models::AttentionMap& map, const Tensor& query_pad,
                                          const Tensor& key_pad);

// The --trace block for one layer, a few indented lines.
std::string describe_attention_stats(const AttentionLayerStats& s);

// Which padding masks apply to a map, by its name: (query_pad, key_pad).
using PadMasksFor = std::function<std::pair<Tensor, Tensor>(const std::string& map_name)>;
// Statistics of every map; with `trace`, also printed (and appended to `log`, if given).
std::vector<AttentionLayerStats> attention_stats_of(const std::vector<models::AttentionMap>& maps,
                                                    const PadMasksFor& masks);
// Prints the --trace blocks of one batch (and writes them to the run's log.txt).
void trace_attention(const std::vector<AttentionLayerStats>& stats, int64_t step, RunDir& run);
// {"encoder.0.self": mean entropy, ...} for a metrics.jsonl record.
nlohmann::json entropy_record(const std::vector<AttentionLayerStats>& stats);

}  // namespace qkv::train
