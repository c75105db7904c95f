#include "nn/attention_pattern.h"

#include <cstdlib>

#include "engine/error.h"

namespace qkv::nn {

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
