#include "engine/error.h"
#include "models/classifiers.h"
#include "nn/init.h"

namespace qkv::models {

VisionTransformer::VisionTransformer(const VisionTransformerConfig& c) : config(c) {
  QKV_CHECK(c.patch_size > 0 && c.image_size % c.patch_size == 0, "VisionTransformer",
            "image_size ", c.image_size, " is not a multiple of patch_size ", c.patch_size);
  const int64_t n = (c.image_size / c.patch_size) * (c.image_size / c.patch_size);
  patch_embed = register_module(
      "patch_embed",
      std::make_shared<nn::Conv2d>(c.in_channels, c.d_model, c.patch_size, c.patch_size));
  cls_token = register_parameter("cls_token", zeros({1, 1, c.d_model}));
  pos_embed = register_parameter("pos_embed", zeros({1, n + 1, c.d_model}));
  nn::init::normal_(cls_token, 0, 0.02);
  nn::init::normal_(pos_embed, 0, 0.02);
  nn::TransformerLayerOptions o{.d_model = c.d_model,
                                .num_heads = c.num_heads,
                                .dim_feedforward = c.dim_feedforward,
                                .dropout = c.dropout,
                                .activation = "gelu",
                                .norm_first = true,
                                .positional = ""};
  encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder>(o, c.num_layers));
  head = register_module("head", std::make_shared<nn::Linear>(c.d_model, c.num_classes));
}

Tensor VisionTransformer::forward(const Tensor& images) {
  QKV_CHECK(images.dim() == 4 && images.size(1) == config.in_channels &&
                images.size(2) == config.image_size && images.size(3) == config.image_size,
            "VisionTransformer", "expected [B, ", config.in_channels, ", ", config.image_size, ", ",
            config.image_size, "], got ", shape_str(images.shape()));
  const int64_t B = images.size(0);
  Tensor patches = patch_embed->forward(images).flatten(2).transpose(1, 2);  // [B, N, D]
  Tensor x = cat({expand(cls_token, {B, 1, config.d_model}), patches}, 1);
  x = add(x, pos_embed);
  return head->forward(select(encoder->forward(x), 1, 0));
}

}  // namespace qkv::models
