// Structured attention patterns: which keys a query may see, known from positions alone.
//
// Causal, sliding-window (local) and block-sparse patterns need no mask tensor: whether query t
// may attend to key s is a formula of (t, s), and whether a whole tile of queries x keys is empty
// is a formula of the tile's corners. The CPU's memory-efficient kernel (engine/cpu/
// attention_kernels.cpp, reached through nn/efficient_attention.h) uses that to skip empty tiles
// outright - no scores are computed for them, forward or backward - so a window of w keys costs
// O(T w) instead of O(T^2). nn::pattern_mask() spells the same pattern out as a dense bool
// mask, which is what the naive attention (and the tests) compare against.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace qkv {

struct AttentionPattern {
  bool causal = false;     // key s is hidden from query t when s > t
  int64_t window = -1;     // >= 0: local attention, key s hidden when |t - s| > window
  int64_t block_size = 0;  // > 0 with block_layout: block-sparse attention
  // bool [ceil(T / block_size), ceil(S / block_size)], true where a block of queries attends to a
  // block of keys (e.g. a diagonal band plus a few global columns).
  Tensor block_layout;

  bool sparse() const { return window >= 0 || block_size > 0; }
  // Whether query t may attend to key s.
  bool allows(int64_t t, int64_t s) const;
  // Whether any query in [t0, t1) may attend to any key in [s0, s1); with a block layout the tile
  // must lie within one block (the kernel tiles by block_size then).
  bool tile_visible(int64_t t0, int64_t t1, int64_t s0, int64_t s1) const;
  // Copies the block layout to host bytes (done once per call, not per tile).
  void prepare();

  std::vector<uint8_t> layout_host;  // filled by prepare()
};

}  // namespace qkv
