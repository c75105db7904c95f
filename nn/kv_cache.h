// The keys and values a MultiheadAttention has seen while decoding, per head [B, H, L, head_dim]
// (MultiheadAttention::forward_cached, nn/attention_decoding.cpp).
#pragma once

#include "engine/tensor.h"

namespace qkv::nn {

class MultiheadAttention;

struct KVCache {
  Tensor k, v;
  // Self-attention's storage: like a std::vector, the buffers [B, H, capacity, head_dim] keep
  // room for more positions and double when full, so a decoding step copies only its own new
  // keys and values instead of the whole prefix (as cat would). k and v are views of them.
  Tensor k_buffer, v_buffer;
  // Appends keys/values [B, H, t, head_dim] along the position dim. Under autograd, when they
  // require a gradient, it concatenates instead so the gradient reaches them.
  void append(const Tensor& k_new, const Tensor& v_new);
  // Keeps the batch rows `rows` (int64 [n], in that order, repeats allowed): beam search
  // continues from the hypotheses it keeps, several of which may extend the same one.
  void select_rows(const Tensor& rows);

  // Self-attention projects one input three ways. At inference a decoding step is mostly
  // per-op cost and the reading of weights, so q_proj, k_proj and v_proj's weights are packed
  // once per decode into one [3E, E] matrix (and bias) and applied as a single product. True
  // when that applies: no autograd, query, key and value the same tensor, and no int8 layer.
  bool fuse_projections(const MultiheadAttention& attention, const Tensor& query, const Tensor& key,
                        const Tensor& value);
  Tensor qkv_weight, qkv_bias;
};

}  // namespace qkv::nn
