#include "nn/linear.h"

#include <cmath>

#include "engine/error.h"
#include "nn/init.h"

namespace qkv::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias) : in_features(in), out_features(out) {
  QKV_CHECK(in > 0 && out > 0, "Linear", "features must be positive, got ", in, " -> ", out);
  weight = register_parameter("weight", Tensor::empty({out, in}));
  // PyTorch's default: kaiming_uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)).
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (has_bias) {
    bias = register_parameter("bias", Tensor::empty({out}));
    double bound = 1 / std::sqrt(double(in));
    init::uniform_(bias, -bound, bound);
  }
}

void Linear::check_input(const Tensor& x) const {
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear", "expected last dim ", in_features,
            ", got input ", shape_str(x.shape()));
}

Tensor Linear::forward(const Tensor& x) {
  check_input(x);
  if (quantized && !grad_enabled()) return quantized->forward(x);
  return linear(x, weight, bias);
}

Tensor Linear::forward_relu(const Tensor& x) {
  check_input(x);
  if (quantized && !grad_enabled()) return relu(quantized->forward(x));
  return linear_relu(x, weight, bias);
}

std::string Linear::describe() const {
  return "Linear(" + std::to_string(in_features) + " -> " + std::to_string(out_features) +
         (bias.defined() ? "" : ", no bias") + ")";
}

}  // namespace qkv::nn
