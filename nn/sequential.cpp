#include "nn/sequential.h"

namespace qkv::nn {

Sequential::Sequential(std::vector<std::shared_ptr<Layer>> layers) {
  for (auto& l : layers) push_back(std::move(l));
}

void Sequential::push_back(std::shared_ptr<Layer> layer) {
  layers_.push_back(register_module(std::to_string(layers_.size()), std::move(layer)));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& l : layers_) y = l->forward(y);
  return y;
}

}  // namespace qkv::nn
