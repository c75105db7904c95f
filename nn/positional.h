// Positional encodings, selectable by name ("sinusoidal", "learned", "relative", "rope", "alibi").
//
// Two families. Absolute encodings are added to the token embeddings before the first layer
// (PositionalEncoding). The others act inside every attention layer (AttentionPosition, see
// nn/attention.h): relative positions (Shaw et al. 2018) add a learned q . a[clip(j - i)] to the
// scores, RoPE rotates queries and keys by position, ALiBi adds -slope_h * |i - j|.
#pragma once

#include "nn/attention.h"

namespace qkv::nn {

class PositionalEncoding : public Module {
 public:
  // x [B, T, D] -> x plus the encodings of positions offset .. offset + T - 1.
  virtual Tensor forward(const Tensor& x, int64_t offset = 0) = 0;
};

// The fixed sin/cos table of "Attention Is All You Need" [n, d]: even columns sin(p /
// 10000^(2i/d)), odd columns cos of the same angle.
Tensor sinusoid_table(int64_t n, int64_t d, DType dtype = DType::f32);

// Fixed table kept as the buffer "pe" [max_len, D] (float32); positions beyond it are computed on
// the fly, so a model trained on short sequences still encodes longer ones. A float64 input gets a
// table computed in float64 (not the float32 buffer converted), so a float64 model is exact here.
class SinusoidalPositionalEncoding : public PositionalEncoding {
 public:
  SinusoidalPositionalEncoding(int64_t d_model, int64_t max_len = 512);
  Tensor forward(const Tensor& x, int64_t offset = 0) override;
  std::string describe() const override { return "SinusoidalPositionalEncoding"; }
  int64_t d_model;
  Tensor pe;
};

// A learned row per position (parameter "weight" [max_len, D], N(0, 0.02)); positions past max_len
// have no row and are an error.
class LearnedPositionalEncoding : public PositionalEncoding {
 public:
  LearnedPositionalEncoding(int64_t d_model, int64_t max_len);
  Tensor forward(const Tensor& x, int64_t offset = 0) override;
  std::string describe() const override { return "LearnedPositionalEncoding"; }
  int64_t d_model, max_len;
  Tensor weight;
};

// Shaw-style relative positions: a learned vector a[d] for each clipped distance
// d = clip(j - i, -max_distance, max_distance); scores[i, j] += q_i . a[d] / sqrt(head_dim).
class RelativePositionBias : public AttentionPosition {
 public:
  RelativePositionBias(int64_t head_dim, int64_t max_distance = 16);
  Tensor score_bias(const Tensor& q, int64_t S) override;
  std::string describe() const override { return "RelativePositionBias"; }
  int64_t head_dim, max_distance;
  Tensor weight;  // [2 * max_distance + 1, head_dim]
};

// Rotary embeddings (Su et al.): feature pairs (i, i + d/2) of queries and keys are rotated by
// angle position * base^(-2i/d), so q_t . k_s depends on t - s only.
class RotaryEmbedding : public AttentionPosition {
 public:
  explicit RotaryEmbedding(int64_t head_dim, double base = 10000.0);
  void rotate(Tensor& q, Tensor& k) override;
  bool rotates() const override { return true; }
  // x [..., L, head_dim] at positions offset .. offset + L - 1 (a decoding step passes its own).
  Tensor apply(const Tensor& x, int64_t offset = 0) const;
  std::string describe() const override { return "RotaryEmbedding"; }
  int64_t head_dim;
  double base;
};

// ALiBi (Press et al.): head h adds -m_h * |i - j| with geometric slopes m_h = 2^(-8 (h+1) / H).
class ALiBi : public AttentionPosition {
 public:
  explicit ALiBi(int64_t num_heads);
  Tensor score_bias(const Tensor& q, int64_t S) override;
  std::string describe() const override { return "ALiBi"; }
  int64_t num_heads;
};

// By name: the input-level encoding (null for the in-attention kinds) and a fresh in-attention
// scheme for one attention layer (null for the input-level kinds). Unknown names throw.
std::shared_ptr<PositionalEncoding> make_positional_encoding(const std::string& kind,
                                                             int64_t d_model, int64_t max_len);
std::shared_ptr<AttentionPosition> make_attention_position(const std::string& kind,
                                                           int64_t num_heads, int64_t head_dim);

}  // namespace qkv::nn
