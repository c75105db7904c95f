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

void append_attention_maps(const nn::TransformerEncoder& encoder, const std::string& prefix,
                           std::vector<AttentionMap>& out) {
  for (size_t i = 0; i < encoder.layers.size(); ++i)
    out.push_back(
        {prefix + "." + std::to_string(i) + ".self", encoder.layers[i]->self_attn->last_weights});
}

void append_attention_maps(const nn::TransformerDecoder& decoder, const std::string& prefix,
                           std::vector<AttentionMap>& out) {
  for (size_t i = 0; i < decoder.layers.size(); ++i) {
    out.push_back(
        {prefix + "." + std::to_string(i) + ".self", decoder.layers[i]->self_attn->last_weights});
    out.push_back(
        {prefix + "." + std::to_string(i) + ".cross", decoder.layers[i]->cross_attn->last_weights});
  }
}

}  // namespace qkv::models
