#include "nn/transformer.h"

#include "nn/checkpoint.h"

namespace qkv::nn {

namespace {

std::shared_ptr<MultiheadAttention> make_self_attention(const TransformerLayerOptions& o) {
  auto attn = std::make_shared<MultiheadAttention>(o.d_model, o.num_heads, o.dropout);
  const std::string& p = o.positional;
  if (p == "relative" || p == "rope" || p == "alibi")
    attn->set_position(make_attention_position(p, o.num_heads, o.d_model / o.num_heads));
  return attn;
}

// x + dropout(sublayer(x)) with the norm placed before (pre-norm) or after (post-norm).
template <typename F>
Tensor residual(const Tensor& x, LayerNorm& norm, Dropout& drop, bool norm_first, F&& sublayer) {
  if (norm_first) return drop.forward_add(sublayer(norm.forward(x)), x);
  return norm.forward(drop.forward_add(sublayer(x), x));
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& o) : options(o) {
  self_attn = register_module("self_attn", make_self_attention(o));
  feed_forward = register_module(
      "feed_forward",
      std::make_shared<FeedForward>(o.d_model, o.dim_feedforward, o.dropout, o.activation));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.d_model));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.d_model));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& pad,
                                        const Tensor& src_mask, bool is_causal) {
  if (!options.checkpoint_activations || !grad_enabled())
    return compute(src, pad, src_mask, is_causal);
  // The masks need no gradient, so the closure may hold them by value.
  return checkpoint(*this,
                    [this, pad, src_mask, is_causal](const std::vector<Tensor>& x) {
                      return compute(x[0], pad, src_mask, is_causal);
                    },
                    {src});
}

Tensor TransformerEncoderLayer::compute(const Tensor& src, const Tensor& pad,
                                        const Tensor& src_mask, bool is_causal) {
  Tensor x = residual(src, *norm1, *dropout1, options.norm_first, [&](const Tensor& h) {
    return self_attn->forward(h, h, h, pad, src_mask, false, true, is_causal).output;
  });
  return residual(x, *norm2, *dropout2, options.norm_first,
                  [&](const Tensor& h) { return feed_forward->forward(h); });
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& o) : options(o) {
  self_attn = register_module("self_attn", make_self_attention(o));
  cross_attn = register_module(
      "cross_attn", std::make_shared<MultiheadAttention>(o.d_model, o.num_heads, o.dropout));
  feed_forward = register_module(
      "feed_forward",
      std::make_shared<FeedForward>(o.d_model, o.dim_feedforward, o.dropout, o.activation));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.d_model));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.d_model));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(o.d_model));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(o.dropout));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const Tensor& tgt_pad, const Tensor& memory_pad,
                                        bool tgt_is_causal) {
  if (!options.checkpoint_activations || !grad_enabled())
    return compute(tgt, memory, tgt_pad, memory_pad, tgt_is_causal);
  // memory carries the encoder's gradient, so it is an input of the checkpoint, not a capture.
  return checkpoint(*this,
                    [this, tgt_pad, memory_pad, tgt_is_causal](const std::vector<Tensor>& x) {
                      return compute(x[0], x[1], tgt_pad, memory_pad, tgt_is_causal);
                    },
                    {tgt, memory});
}

Tensor TransformerDecoderLayer::compute(const Tensor& tgt, const Tensor& memory,
                                        const Tensor& tgt_pad, const Tensor& memory_pad,
                                        bool tgt_is_causal) {
  Tensor x = residual(tgt, *norm1, *dropout1, options.norm_first, [&](const Tensor& h) {
    return self_attn->forward(h, h, h, tgt_pad, Tensor(), false, true, tgt_is_causal).output;
  });
  x = residual(x, *norm2, *dropout2, options.norm_first, [&](const Tensor& h) {
    return cross_attn->forward(h, memory, memory, memory_pad, Tensor(), false).output;
  });
  return residual(x, *norm3, *dropout3, options.norm_first,
                  [&](const Tensor& h) { return feed_forward->forward(h); });
}

Tensor TransformerDecoderLayer::forward_step(const Tensor& tgt, const Tensor& memory,
                                             const Tensor& memory_pad, Cache& cache) {
  Tensor x = residual(tgt, *norm1, *dropout1, options.norm_first, [&](const Tensor& h) {
    return self_attn->forward_cached(h, h, h, cache.self, false);
  });
  x = residual(x, *norm2, *dropout2, options.norm_first, [&](const Tensor& h) {
    return cross_attn->forward_cached(h, memory, memory, cache.cross, true, memory_pad);
  });
  return residual(x, *norm3, *dropout3, options.norm_first,
                  [&](const Tensor& h) { return feed_forward->forward(h); });
}

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) layers.push_back(std::make_shared<TransformerEncoderLayer>(o));
  auto list = register_module("layers", std::make_shared<Module>());
  for (size_t i = 0; i < layers.size(); ++i) list->register_module(std::to_string(i), layers[i]);
  if (o.norm_first) norm = register_module("norm", std::make_shared<LayerNorm>(o.d_model));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& pad, bool is_causal) {
  Tensor x = src;
  for (auto& layer : layers) x = layer->forward(x, pad, Tensor(), is_causal);
  return norm ? norm->forward(x) : x;
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) layers.push_back(std::make_shared<TransformerDecoderLayer>(o));
  auto list = register_module("layers", std::make_shared<Module>());
  for (size_t i = 0; i < layers.size(); ++i) list->register_module(std::to_string(i), layers[i]);
  if (o.norm_first) norm = register_module("norm", std::make_shared<LayerNorm>(o.d_model));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_pad,
                                   const Tensor& memory_pad) {
  Tensor x = tgt;
  for (auto& layer : layers) x = layer->forward(x, memory, tgt_pad, memory_pad);
  return norm ? norm->forward(x) : x;
}

}  // namespace qkv::nn

namespace qkv::nn {

Tensor TransformerDecoder::forward_step(const Tensor& tgt, const Tensor& memory,
                                        const Tensor& memory_pad,
                                        std::vector<TransformerDecoderLayer::Cache>& caches) {
  caches.resize(layers.size());
  Tensor x = tgt;
  for (size_t i = 0; i < layers.size(); ++i)
    x = layers[i]->forward_step(x, memory, memory_pad, caches[i]);
  return norm ? norm->forward(x) : x;
}

}  // namespace qkv::nn
