// Attention for one decoding step: each (batch, head) has a single query row attending to the S
// cached keys. The tiled kernel of efficient_attention.h is built for T x S problems; for T = 1
// its setup (tiles, per-thread buffers, mask views) costs more than the arithmetic, which is one
// dot product per key and one axpy per value row. This is that loop, for inference only.
#pragma once

#include "engine/tensor.h"

namespace qkv::nn {

// q [B, H, 1, d], k [B, H, S, d], v [B, H, S, dv] (any strides; CPU, float32 or float64) and
// key_padding_mask [B, S] (bool, true = padding) or undefined -> [B, H, 1, dv], equal to
// softmax(q k^T * scale) v. A row whose keys are all padding gives zeros, as efficient_attention.
// Records no graph: throws if an operand requires a gradient (use efficient_attention then).
Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& key_padding_mask = Tensor(), double scale = -1);

}  // namespace qkv::nn
