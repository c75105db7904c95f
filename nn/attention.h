// Scaled dot-product attention and MultiheadAttention, with PyTorch's names and mask conventions.
//
// Masks: a bool mask is true where a query may NOT attend (PyTorch's attn_mask and
// key_padding_mask); a floating mask is added to the scores (0 = keep, -inf = block, anything in
// between = a bias). A query whose every key is blocked gets all-zero weights and a zero output,
// never NaN: the engine's softmax maps a row of -inf to zeros.
#pragma once

#include <optional>

#include "nn/linear.h"

namespace qkv::nn {

struct AttentionOutput {
  Tensor output;
  Tensor weights;
};

// q [..., T, d], k [..., S, d], v [..., S, dv] -> output [..., T, dv] and weights [..., T, S].
// scores = q k^T * scale (default 1/sqrt(d)), then attn_mask (bool or additive, broadcast to
// [..., T, S]), then the causal mask if is_causal, softmax over S, dropout on the weights.
AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& attn_mask = Tensor(),
                                             bool is_causal = false, double dropout_p = 0.0,
                                             std::optional<double> scale = std::nullopt);

// bool [T, S], true above the diagonal: position t may attend to keys 0..t only.
Tensor causal_mask(int64_t T, int64_t S = -1, Device device = Device::cpu());

// Positional information that lives inside attention rather than on the input embeddings:
// rotating queries and keys (RoPE) or adding a term to the scores (relative positions, ALiBi).
// Queries and keys arrive per head, [B, H, T, head_dim].
class AttentionPosition : public Module {
 public:
  virtual void rotate(Tensor& q, Tensor& k) { (void)q, (void)k; }
  // A term broadcastable to [B, H, T, S], already on the scale of the scaled scores; undefined
  // for none.
  virtual Tensor score_bias(const Tensor& q, int64_t S) {
    (void)q, (void)S;
    return Tensor();
  }
};

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

  // When record_weights is set, every forward keeps its per-head weights [B, H, T, S] (detached)
  // in last_weights, for attention heatmaps.
  bool record_weights = false;
  Tensor last_weights;
};

}  // namespace qkv::nn
