// Attention for one decoding step: each (batch, head) has a single query row attending to the S
// cached keys, on the backend's single-query kernel (Backend::decode_attention; the CPU's is
// engine/cpu/decode_attention.cpp). The tiled kernel of efficient_attention.h is built for T x S
// problems; for T = 1 its setup costs more than the arithmetic. Inference only.
#pragma once

#include "engine/tensor.h"

namespace qkv::nn {

// q [B, H, 1, d], k [B, H, S, d], v [B, H, S, dv] (any strides; a dtype the backend's
// kernel takes, Backend::supports_decode_attention) and
// key_padding_mask [B, S] (bool, true = padding) or undefined -> [B, H, 1, dv], equal to
// softmax(q k^T * scale) v. A row whose keys are all padding gives zeros, as efficient_attention.
// Records no graph: throws if an operand requires a gradient (use efficient_attention then).
Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& key_padding_mask = Tensor(), double scale = -1);

// Whether decode_attention takes these operands: shapes as above, one dtype and device, no
// gradient wanted, and a backend with a single-query kernel for the dtype.
bool decode_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& key_padding_mask = Tensor());

}  // namespace qkv::nn
