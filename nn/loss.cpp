#include "nn/loss.h"

#include "engine/error.h"

namespace qkv::nn {

namespace {
Tensor reduce(const Tensor& x, Reduction r) {
  if (r == Reduction::mean) return mean(x);
  if (r == Reduction::sum) return sum(x);
  return x;
}
}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r) {
  QKV_CHECK(input.shape() == target.shape(), "mse_loss", "input ", shape_str(input.shape()),
            " and target ", shape_str(target.shape()), " differ");
  return reduce(square(sub(input, target)), r);
}

Tensor binary_cross_entropy_with_logits(const Tensor& x, const Tensor& y, Reduction r) {
  QKV_CHECK(x.shape() == y.shape(), "binary_cross_entropy_with_logits", "logits ",
            shape_str(x.shape()), " and target ", shape_str(y.shape()), " differ");
  Tensor loss = add(sub(relu(x), mul(x, y)), log(add(exp(neg(abs(x))), 1.0)));
  return reduce(loss, r);
}

}  // namespace qkv::nn
