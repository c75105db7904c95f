// Attention weights of a model's last forward, named by layer, for heatmaps.
//
// A model sets an observer on each of its MultiheadAttention layers (MultiheadAttention::observer)
// that keeps the last forward's per-head weights, and hands them back with readable names.
#pragma once

#include <string>
#include <vector>

#include "nn/transformer.h"

namespace qkv::models {

struct AttentionMap {
  std::string name;  // "encoder.0.self", "decoder.1.self", "decoder.1.cross"
  Tensor weights;    // [B, H, T, S], detached
  Tensor q, k, v;    // the per-head projections the weights came from, [B, H, L, head_dim]
};

void set_record_attention(nn::TransformerEncoder& encoder, bool on);
void set_record_attention(nn::TransformerDecoder& decoder, bool on);
// Appends "<prefix>.<i>.self" (and ".cross" for the decoder) for every layer.
void append_attention_maps(const nn::TransformerEncoder& encoder, const std::string& prefix,
                           std::vector<AttentionMap>& out);
void append_attention_maps(const nn::TransformerDecoder& decoder, const std::string& prefix,
                           std::vector<AttentionMap>& out);

}  // namespace qkv::models
