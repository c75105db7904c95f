#include "models/attention_maps.h"

#include <memory>

namespace qkv::models {

namespace {

// The observer set_record_attention installs: it keeps the last forward's record, which map_of
// finds again through the observer's type.
struct KeepLast {
  std::shared_ptr<nn::AttentionRecord> last = std::make_shared<nn::AttentionRecord>();
  void operator()(const nn::AttentionRecord& record) const { *last = record; }
};

void record(nn::MultiheadAttention& attention, bool on) {
  attention.observer = on ? nn::AttentionObserver(KeepLast{}) : nn::AttentionObserver();
}

AttentionMap map_of(const std::string& name, const nn::MultiheadAttention& a) {
  const KeepLast* keep = a.observer.target<KeepLast>();
  if (!keep) return {name, Tensor(), Tensor(), Tensor(), Tensor()};
  const nn::AttentionRecord& r = *keep->last;
  return {name, r.weights, r.q, r.k, r.v};
}

}  // namespace

void set_record_attention(nn::TransformerEncoder& encoder, bool on) {
  for (auto& l : encoder.layers) record(*l->self_attn, on);
}

void set_record_attention(nn::TransformerDecoder& decoder, bool on) {
  for (auto& l : decoder.layers) {
    record(*l->self_attn, on);
    record(*l->cross_attn, on);
  }
}

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
