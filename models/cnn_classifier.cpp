#include "engine/error.h"
#include "models/classifiers.h"

namespace qkv::models {

CnnClassifier::CnnClassifier(const CnnClassifierConfig& c) : config(c) {
  QKV_CHECK(!c.channels.empty(), "CnnClassifier", "needs at least one block");
  stem = register_module(
      "stem", std::make_shared<nn::Conv2d>(c.in_channels, c.channels[0], 3, 1, 1, 1, false));
  stem_bn = register_module("stem_bn", std::make_shared<nn::BatchNorm2d>(c.channels[0]));
  auto list = register_module("blocks", std::make_shared<nn::Module>());
  int64_t in = c.channels[0];
  for (size_t i = 0; i < c.channels.size(); ++i) {
    blocks.push_back(std::make_shared<nn::ResidualBlock>(in, c.channels[i], i == 0 ? 1 : 2,
                                                         c.attention, c.reduction));
    list->register_module(std::to_string(i), blocks.back());
    in = c.channels[i];
  }
  head = register_module("head", std::make_shared<nn::Linear>(in, c.num_classes));
}

Tensor CnnClassifier::forward(const Tensor& images) {
  QKV_CHECK(images.dim() == 4 && images.size(1) == config.in_channels, "CnnClassifier",
            "expected [B, ", config.in_channels, ", H, W], got ", shape_str(images.shape()));
  Tensor x = stem_bn->forward_relu(stem->forward(images));
  for (auto& block : blocks) x = block->forward(x);
  return head->forward(mean(x, {2, 3}));  // global average pooling: any input size works
}

std::vector<Tensor> CnnClassifier::se_weights() const {
  std::vector<Tensor> out;
  for (auto& b : blocks) out.push_back(b->se ? b->se->last_weights : Tensor());
  return out;
}

std::vector<Tensor> CnnClassifier::cbam_spatial_maps() const {
  std::vector<Tensor> out;
  for (auto& b : blocks) out.push_back(b->cbam ? b->cbam->last_spatial_map : Tensor());
  return out;
}

}  // namespace qkv::models
