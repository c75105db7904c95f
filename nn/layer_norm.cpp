#include "nn/layer_norm.h"

#include "nn/init.h"

namespace qkv::nn {

LayerNorm::LayerNorm(Shape shape, double eps_, bool affine)
    : normalized_shape(std::move(shape)), eps(eps_) {
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

}  // namespace qkv::nn
