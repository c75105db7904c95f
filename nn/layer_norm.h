// LayerNorm(normalized_shape, eps, elementwise_affine) over the trailing dims, as torch.nn.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

class LayerNorm : public Layer {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  explicit LayerNorm(int64_t dim, double eps = 1e-5) : LayerNorm(Shape{dim}, eps) {}
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "LayerNorm(" + shape_str(normalized_shape) + ")"; }

  Shape normalized_shape;
  double eps;
  Tensor weight, bias;  // ones and zeros
};

}  // namespace qkv::nn
