#include "engine/attention_pattern.h"

#include <cstdlib>

#include "engine/error.h"

namespace qkv {

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

}  // namespace qkv
