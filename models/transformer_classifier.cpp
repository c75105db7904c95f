#include <cmath>

#include "engine/check_name.h"
#include "engine/error.h"
#include "models/classifier_names.h"
#include "models/classifiers.h"
#include "nn/init.h"

namespace qkv::models {

TransformerClassifier::TransformerClassifier(const TransformerClassifierConfig& c) : config(c) {
  check_name_among(c.pooling, pooling_names(), "TransformerClassifier", "pooling");
  embed = register_module("embed", std::make_shared<nn::Embedding>(c.vocab, c.d_model));
  // forward() scales embeddings by sqrt(d_model): start them at std d_model^-1/2 so the product
  // is unit-scale and does not drown the positional encoding (see Seq2SeqTransformer).
  nn::init::normal_(embed->weight, 0.0, 1.0 / std::sqrt(double(c.d_model)));
  // One more position for the [CLS] token.
  pos = nn::make_positional_encoding(c.positional, c.d_model, c.max_len + 1);
  if (pos) register_module("pos", pos);
  nn::TransformerLayerOptions o{.d_model = c.d_model,
                                .num_heads = c.num_heads,
                                .dim_feedforward = c.dim_feedforward,
                                .dropout = c.dropout,
                                .activation = "gelu",
                                .norm_first = c.norm_first,
                                .positional = c.positional};
  encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder>(o, c.num_layers));
  head = register_module("head", std::make_shared<nn::Linear>(c.d_model, c.num_classes));
  if (c.pooling == "cls") {
    cls_token = register_parameter("cls_token", zeros({1, 1, c.d_model}));
    nn::init::normal_(cls_token, 0, 0.02);
  }
}

Tensor TransformerClassifier::forward(const Tensor& ids, const Tensor& pad_mask) {
  QKV_CHECK(ids.dim() == 2, "TransformerClassifier", "expected ids [B, T], got ",
            shape_str(ids.shape()));
  const int64_t B = ids.size(0), T = ids.size(1);
  Tensor x = mul(embed->forward(ids), std::sqrt(double(config.d_model)));
  Tensor mask = pad_mask.defined() ? pad_mask : zeros({B, T}, {DType::b8, ids.device()});
  if (config.pooling == "cls") {
    x = cat({expand(cls_token.to(x.dtype()), {B, 1, config.d_model}), x}, 1);
    mask = cat({zeros({B, 1}, {DType::b8, ids.device()}), mask}, 1);
  }
  if (pos) x = pos->forward(x);
  Tensor h = encoder->forward(x, mask);
  Tensor pooled;
  if (config.pooling == "cls") {
    pooled = select(h, 1, 0);
  } else {
    Tensor keep = logical_not(mask).to(h.dtype()).unsqueeze(-1);  // [B, T, 1]
    pooled =
        div(sum(mul(h, keep), {1}), maximum(sum(keep, {1}), ones({1}, {h.dtype(), h.device()})));
  }
  return head->forward(pooled);
}

}  // namespace qkv::models
