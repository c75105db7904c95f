// Structured attention patterns for nn's attention: the pattern itself (causal, window,
// block-sparse) is engine's (engine/attention_pattern.h), since the backends' kernels read it;
// here it is spelled out as a dense mask, and a block layout is built.
#pragma once

#include "engine/attention_pattern.h"
#include "engine/ops.h"

namespace qkv::nn {

using qkv::AttentionPattern;

// The pattern as a bool [T, S] mask, true = blocked (PyTorch's convention).
Tensor pattern_mask(const AttentionPattern& pattern, int64_t T, int64_t S,
                    Device device = Device::cpu());

// A block-sparse layout: each query block sees its own block, `band` blocks on either side, and
// the first `global` key blocks (a simplified BigBird / Longformer layout).
Tensor band_block_layout(int64_t T, int64_t S, int64_t block_size, int64_t band, int64_t global);

}  // namespace qkv::nn
