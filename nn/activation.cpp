#include "nn/activation.h"

#include <typeinfo>

#include "engine/error.h"

namespace qkv::nn {

Dropout::Dropout(double p_) : p(p_) {
  QKV_CHECK(p >= 0 && p < 1, "Dropout", "p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0) return x;
  return dropout(x, p, true);
}

Tensor Dropout::forward_add(const Tensor& x, const Tensor& residual) {
  if (typeid(*this) != typeid(Dropout) || !is_training() || p == 0)
    return add(residual, forward(x));
  return dropout_add(x, residual, p, true);
}

std::shared_ptr<Layer> make_activation(const std::string& name) {
  if (name == "relu") return std::make_shared<ReLU>();
  if (name == "gelu") return std::make_shared<GELU>();
  throw Error("make_activation: unknown activation '" + name + "' (relu, gelu)");
}

}  // namespace qkv::nn
