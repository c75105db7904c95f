#include "models/attention_maps.h"

namespace qkv::models {

void set_record_attention(nn::TransformerEncoder& encoder, bool on) {
  for (auto& l : encoder.layers) l->self_attn->record_weights = on;
}

void set_record_attention(nn::TransformerDecoder& decoder, bool on) {
  for (auto& l : decoder.layers) {
    l->self_attn->record_weights = on;
    l->cross_attn->record_weights = on;
  }
}

namespace {
AttentionMap map_of(const std::string& name, const nn::MultiheadAttention& a) {
  return {name, a.last_weights, a.last_q, a.last_k, a.last_v};
}
}  // namespace

void append_attention_maps(const nn::TransformerEncoder& encoder, const std::string& prefix,
                           std::vector<AttentionMap>& out) {
  for (size_t i = 0; i < encoder.layers.size(); ++i)
    out.push_back(
        map_of(prefix + "." + std::to_string(i) + ".self", *encoder.layers[i]->self_attn));
}

void append_attention_maps(const nn::TransformerDecoder& decoder, const std::string& prefix,
                           std::vector<AttentionMap>& out) {
  for (size_t i = 0; i < decoder.layers.size(); ++i) {
    const std::string layer = prefix + "." + std::to_string(i);
    out.push_back(map_of(layer + ".self", *decoder.layers[i]->self_attn));
    out.push_back(map_of(layer + ".cross", *decoder.layers[i]->cross_attn));
  }
}

}  // namespace qkv::models
