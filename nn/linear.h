// Linear(in_features, out_features, bias): y = x W^T + b over the last dim, as torch.nn.Linear.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

class Linear : public Layer {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)), the ReLU in the product's epilogue (linear_relu) where the float weights run.
  Tensor forward_relu(const Tensor& x);
  std::string describe() const override;
  // Throws qkv::Error unless x's last dim is in_features (what forward checks first).
  void check_input(const Tensor& x) const;

  int64_t in_features, out_features;
  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or undefined
  // Set by quantize_linear_layers (nn/quantized.h): forward runs this int8 version instead
  // whenever no graph is recorded (inference); training keeps using the float weights.
  std::shared_ptr<Layer> quantized;
};

}  // namespace qkv::nn
