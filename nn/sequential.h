// Sequential: layers applied in order, registered as "0", "1", ... like torch.nn.Sequential.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

class Sequential : public Layer {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Layer>> layers);
  void push_back(std::shared_ptr<Layer> layer);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  std::shared_ptr<Layer> operator[](size_t i) const { return layers_.at(i); }
  std::string describe() const override { return "Sequential"; }

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace qkv::nn
