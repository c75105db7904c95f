#include "nn/batch_norm.h"

#include "engine/error.h"

namespace qkv::nn {

BatchNorm2d::BatchNorm2d(int64_t c, double eps_, double momentum_)
    : num_features(c), eps(eps_), momentum(momentum_) {
  weight = register_parameter("weight", ones({c}));
  bias = register_parameter("bias", zeros({c}));
  running_mean = register_buffer("running_mean", zeros({c}));
  running_var = register_buffer("running_var", ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {DType::i64}));
}

Tensor BatchNorm2d::forward(const Tensor& x) { return normalize(x, false); }

Tensor BatchNorm2d::forward_relu(const Tensor& x) { return normalize(x, true); }

Tensor BatchNorm2d::normalize(const Tensor& x, bool relu) {
  QKV_CHECK(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d", "expected [B, ", num_features,
            ", H, W], got ", shape_str(x.shape()));
  if (is_training())
    QKV_CHECK(x.size(0) * x.size(2) * x.size(3) > 1, "BatchNorm2d",
              "training needs more than one value per channel");
  Tensor y =
      (relu ? batch_norm_relu : batch_norm)(x, running_mean, running_var, weight.to(x.dtype()),
                                            bias.to(x.dtype()), is_training(), momentum, eps);
  if (is_training()) {  // counted once the batch's statistics are folded in
    NoGrad no_grad;
    copy_(num_batches_tracked, add(num_batches_tracked.to(DType::f64), 1.0).to(DType::i64));
  }
  return y;
}

}  // namespace qkv::nn
