#include "nn/attention_pattern.h"

#include <cstdlib>

#include "engine/error.h"

namespace qkv::nn {

void AttentionPattern::prepare() {
  if (block_size <= 0) return;
  QKV_CHECK(block_layout.defined() && block_layout.dim() == 2 && block_layout.dtype() == DType::b8,
            "AttentionPattern", "block_size needs a bool [query blocks, key blocks] block_layout");
  std::vector<int> v = block_layout.to_vector<int>();
  layout_host.assign(v.begin(), v.end());
}

bool AttentionPattern::allows(int64_t t, int64_t s) const {
  if (causal && s > t) return false;
  if (window >= 0 && std::llabs(t - s) > window) return false;
  if (block_size > 0)
    return layout_host[size_t((t / block_size) * block_layout.size(1) + s / block_size)] != 0;
  return true;
}

bool AttentionPattern::tile_visible(int64_t t0, int64_t t1, int64_t s0, int64_t s1) const {
  if (causal && s0 > t1 - 1) return false;
  if (window >= 0 && (s0 > t1 - 1 + window || s1 - 1 < t0 - window)) return false;
  if (block_size > 0)
    return layout_host[size_t((t0 / block_size) * block_layout.size(1) + s0 / block_size)] != 0;
  return true;
}

Tensor pattern_mask(const AttentionPattern& pattern, int64_t T, int64_t S, Device device) {
  AttentionPattern p = pattern;
  p.prepare();
  if (p.block_size > 0)
    QKV_CHECK(
        p.block_layout.size(0) * p.block_size >= T && p.block_layout.size(1) * p.block_size >= S,
        "pattern_mask", "block_layout ", shape_str(p.block_layout.shape()), " does not cover [", T,
        ", ", S, "] with blocks of ", p.block_size);
  std::vector<double> blocked(size_t(T * S));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s) blocked[size_t(t * S + s)] = p.allows(t, s) ? 0 : 1;
  return tensor(blocked, {T, S}).to(DType::b8).to(device);
}

Tensor band_block_layout(int64_t T, int64_t S, int64_t block_size, int64_t band, int64_t global) {
  const int64_t tb = (T + block_size - 1) / block_size, sb = (S + block_size - 1) / block_size;
  std::vector<double> on(size_t(tb * sb));
  for (int64_t i = 0; i < tb; ++i)
    for (int64_t j = 0; j < sb; ++j)
      on[size_t(i * sb + j)] = (std::llabs(i - j) <= band || j < global) ? 1 : 0;
  return tensor(on, {tb, sb}).to(DType::b8);
}

}  // namespace qkv::nn
