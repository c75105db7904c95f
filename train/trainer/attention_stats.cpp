#include "train/trainer/attention_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/error.h"
#include "engine/ops.h"

namespace qkv::train {

namespace {

// Whether position i of batch row b is padding, for a [B, L] bool mask (or none).
struct PadMask {
  std::vector<int64_t> values;
  int64_t length = 0;
  explicit PadMask(const Tensor& m) {
    if (!m.defined()) return;
    values = m.to_vector<int64_t>();
    length = m.size(1);
  }
  bool padded(int64_t b, int64_t i) const {
    return !values.empty() && values[size_t(b * length + i)] != 0;
  }
};

}  // namespace

AttentionLayerStats attention_layer_stats(const models::AttentionMap& map, const Tensor& query_pad,
                                          const Tensor& key_pad) {
  const char* op = "attention_layer_stats";
  QKV_CHECK(map.weights.defined() && map.q.defined() && map.k.defined(), op, "layer '", map.name,
            "' recorded no attention (set_record_attention before the forward)");
  QKV_CHECK(map.weights.dim() == 4, op, "weights of '", map.name, "' must be [B, H, T, S], got ",
            shape_str(map.weights.shape()));
  const int64_t B = map.weights.size(0), H = map.weights.size(1), T = map.weights.size(2),
                S = map.weights.size(3);
  const double scale = 1.0 / std::sqrt(double(map.q.size(-1)));
  AttentionLayerStats s;
  s.name = map.name;
  s.q = map.q.shape(), s.k = map.k.shape(), s.v = map.v.shape();
  std::vector<double> weights = map.weights.to_vector<double>();
  std::vector<double> raw;
  {
    NoGrad no_grad;
    raw = matmul(map.q, map.k.transpose(-1, -2)).to_vector<double>();
  }
  // The masks must cover the map's positions exactly (a [CLS] token the model prepends is the
  // caller's to account for): anything else would read past them.
  QKV_CHECK(!query_pad.defined() ||
                (query_pad.dim() == 2 && query_pad.size(0) == B && query_pad.size(1) == T),
            op, "layer '", map.name, "': query padding mask ",
            query_pad.defined() ? shape_str(query_pad.shape()) : "", " is not [B, T] = [", B, ",",
            T, "]");
  QKV_CHECK(
      !key_pad.defined() || (key_pad.dim() == 2 && key_pad.size(0) == B && key_pad.size(1) == S),
      op, "layer '", map.name, "': key padding mask ",
      key_pad.defined() ? shape_str(key_pad.shape()) : "", " is not [B, S] = [", B, ",", S, "]");
  const PadMask qpad(query_pad), kpad(key_pad);
  s.raw_min = s.row_sum_min = s.entropy_min = INFINITY;
  s.raw_max = s.row_sum_max = s.entropy_max = -INFINITY;
  double entropy_sum = 0, uniform_sum = 0;
  int64_t rows = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        if (qpad.padded(b, t)) continue;
        const size_t row = size_t(((b * H + h) * T + t) * S);
        double sum = 0, entropy = 0;
        int64_t keys = 0;
        for (int64_t j = 0; j < S; ++j) {
          const double p = weights[row + size_t(j)];
          sum += p;
          if (kpad.padded(b, j) || p == 0) continue;  // masked out: not a score that competes
          ++keys;
          entropy -= p * std::log(p);
          s.raw_min = std::min(s.raw_min, raw[row + size_t(j)]);
          s.raw_max = std::max(s.raw_max, raw[row + size_t(j)]);
        }
        s.row_sum_min = std::min(s.row_sum_min, sum);
        s.row_sum_max = std::max(s.row_sum_max, sum);
        s.entropy_min = std::min(s.entropy_min, entropy);
        s.entropy_max = std::max(s.entropy_max, entropy);
        entropy_sum += entropy;
        uniform_sum += std::log(double(std::max<int64_t>(keys, 1)));
        ++rows;
      }
  QKV_CHECK(rows > 0, op, "layer '", map.name, "' has no unpadded query rows");
  s.scaled_min = s.raw_min * scale, s.scaled_max = s.raw_max * scale;
  s.entropy_mean = entropy_sum / double(rows);
  s.uniform_entropy = uniform_sum / double(rows);
  return s;
}

std::string describe_attention_stats(const AttentionLayerStats& s) {
  char text[640];
  std::snprintf(text, sizeof text,
                "%s\n"
                "  Q %s  K %s  V %s\n"
                "  raw scores q.k      [%.3f, %.3f]\n"
                "  scaled / sqrt(d)    [%.3f, %.3f]\n"
                "  softmax row sums    [%.6f, %.6f]\n"
                "  row entropy (nats)  mean %.3f, range [%.3f, %.3f]; uniform would be %.3f\n",
                s.name.c_str(), shape_str(s.q).c_str(), shape_str(s.k).c_str(),
                shape_str(s.v).c_str(), s.raw_min, s.raw_max, s.scaled_min, s.scaled_max,
                s.row_sum_min, s.row_sum_max, s.entropy_mean, s.entropy_min, s.entropy_max,
                s.uniform_entropy);
  return text;
}

std::vector<AttentionLayerStats> attention_stats_of(const std::vector<models::AttentionMap>& maps,
                                                    const PadMasksFor& masks) {
  std::vector<AttentionLayerStats> stats;
  for (const auto& m : maps) {
    auto [query_pad, key_pad] = masks(m.name);
    stats.push_back(attention_layer_stats(m, query_pad, key_pad));
  }
  return stats;
}

void trace_attention(const std::vector<AttentionLayerStats>& stats, int64_t step, RunDir& run) {
  std::string text = "attention trace, step " + std::to_string(step) + " (before its update):\n";
  for (const auto& s : stats) text += describe_attention_stats(s);
  std::printf("%s", text.c_str());
  run.log(text);
}

nlohmann::json entropy_record(const std::vector<AttentionLayerStats>& stats) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& s : stats) j[s.name] = s.entropy_mean;
  return j;
}

}  // namespace qkv::train
