// Scaled dot-product attention and MultiheadAttention, with PyTorch's names and mask conventions.
//
// Masks: a bool mask is true where a query may NOT attend (PyTorch's attn_mask and
// key_padding_mask); a floating mask is added to the scores (0 = keep, -inf = block, anything in
// between = a bias). A query whose every key is blocked gets all-zero weights and a zero output,
// never NaN: the engine's softmax maps a row of -inf to zeros.
//
// This file is attention as training sees it; the KV cache and the decoding step are
// nn/kv_cache.h and nn/attention_decoding.cpp, and the choice of kernel is nn/attention_kernel.h.
#pragma once

#include <functional>
#include <optional>

#include "nn/attention_kernel.h"
#include "nn/kv_cache.h"
#include "nn/linear.h"

namespace qkv::nn {

// q [..., T, d], k [..., S, d], v [..., S, dv] -> output [..., T, dv] and weights [..., T, S].
// scores = q k^T * scale (default 1/sqrt(d)), then attn_mask (bool or additive, broadcast to
// [..., T, S]), then the causal mask if is_causal, softmax over S, dropout on the weights.
// With need_weights = false the weights come back undefined, and when the operands allow it
// (no mask or a bool one; on the CPU with any dropout, on a GPU's fused kernel without) the
// memory-efficient kernel runs instead of the naive one: same output, and with dropout the same
// dropped weights from the same generator state, in O(T) memory (nn/attention_kernel.h).
AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& attn_mask = Tensor(),
                                             bool is_causal = false, double dropout_p = 0.0,
                                             std::optional<double> scale = std::nullopt,
                                             bool need_weights = true);

// Positional information that lives inside attention rather than on the input embeddings:
// rotating queries and keys (RoPE) or adding a term to the scores (relative positions, ALiBi).
// Queries and keys arrive per head, [B, H, T, head_dim].
class AttentionPosition : public Module {
 public:
  virtual void rotate(Tensor& q, Tensor& k) { (void)q, (void)k; }
  // Whether rotate changes q and k (self-attention then keeps its projections apart).
  virtual bool rotates() const { return false; }
  // A term broadcastable to [B, H, T, S], already on the scale of the scaled scores; undefined
  // for none.
  virtual Tensor score_bias(const Tensor& q, int64_t S) {
    (void)q, (void)S;
    return Tensor();
  }
};

// What an observer of MultiheadAttention sees of one forward, all detached: the per-head weights
// [B, H, T, S] and the projected per-head queries, keys and values [B, H, L, head_dim] they were
// computed from.
struct AttentionRecord {
  Tensor weights, q, k, v;
};
using AttentionObserver = std::function<void(const AttentionRecord&)>;

// MultiheadAttention(embed_dim, num_heads, dropout, bias, kdim, vdim), batch first: query
// [B, T, E], key [B, S, kdim], value [B, S, vdim] -> output [B, T, E].
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     int64_t kdim = -1, int64_t vdim = -1);

  // key_padding_mask [B, S] (bool true = pad, or additive float); attn_mask [T, S] or [B*H, T, S]
  // or [B, H, T, S]. weights: [B, H, T, S] per head, or their mean over heads [B, T, S] when
  // average_attn_weights; undefined unless need_weights.
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& key_padding_mask = Tensor(),
                          const Tensor& attn_mask = Tensor(), bool need_weights = true,
                          bool average_attn_weights = true, bool is_causal = false);

  // Sets (or clears) the in-attention positional scheme; registered as "position".
  void set_position(std::shared_ptr<AttentionPosition> position);
  std::string describe() const override;

  int64_t embed_dim, num_heads, head_dim;
  double dropout;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;
  std::shared_ptr<AttentionPosition> position;

  // When set, every forward computes the weights (the composed kernel) and hands them, with the
  // q, k and v they came from, to the observer: attention heatmaps, statistics and
  // `qkv train --trace` (models/attention_maps.h).
  AttentionObserver observer;

  // Sparse / local attention: a sliding window or a block-sparse layout (nn/attention_pattern.h)
  // applied on top of the masks. The memory-efficient kernel skips the tiles it leaves empty; when
  // weights are needed the same pattern is applied as a dense mask instead.
  AttentionPattern pattern;
  // Use the memory-efficient kernel whenever no weights are needed and nothing forbids it
  // (additive masks or position biases; dropout while training, except on the CPU, whose kernel
  // draws the same dropout masks as the naive one). Off: always the naive kernel.
  bool memory_efficient = true;

  // Incremental decoding (nn/kv_cache.h, nn/attention_decoding.cpp).
  using KVCache = nn::KVCache;
  // One decoding step attending to a cache. Self-attention (static_kv = false): the new tokens'
  // keys and values (from key/value [B, t, E]) are appended to the cache, and the query attends to
  // everything cached, which is every earlier position - so no causal mask is needed. Cross-
  // attention (static_kv = true): keys and values are projected from key/value on the first call
  // only and reused afterwards. In-attention positional schemes are not supported here.
  Tensor forward_cached(const Tensor& query, const Tensor& key, const Tensor& value, KVCache& cache,
                        bool static_kv, const Tensor& key_padding_mask = Tensor());

 private:
  Tensor attend(const Tensor& q, const KVCache& cache, const Tensor& key_padding_mask);
  // Whether a forward with this query, key and value projects them as one product
  // (packed_projection).
  bool projects_packed(const Tensor& query, const Tensor& key, const Tensor& value) const;
  // [B, T, 3E]: the q, k and v projections of x in one product, PyTorch's in_proj_weight.
  Tensor packed_projection(const Tensor& x) const;
};

}  // namespace qkv::nn
