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

Tensor BatchNorm2d::forward(const Tensor& x) {
  QKV_CHECK(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d", "expected [B, ", num_features,
            ", H, W], got ", shape_str(x.shape()));
  const Shape channel{1, num_features, 1, 1};
  Tensor mu, variance;
  if (is_training()) {
    const int64_t n = x.size(0) * x.size(2) * x.size(3);
    QKV_CHECK(n > 1, "BatchNorm2d", "training needs more than one value per channel");
    mu = mean(x, {0, 2, 3}, true);
    variance = mean(square(sub(x, mu)), {0, 2, 3}, true);
    NoGrad no_grad;
    Tensor unbiased = mul(variance.detach().reshape({num_features}), double(n) / double(n - 1));
    copy_(running_mean,
          add(mul(running_mean, 1 - momentum),
              mul(mu.detach().reshape({num_features}).to(running_mean.dtype()), momentum)));
    copy_(running_var,
          add(mul(running_var, 1 - momentum), mul(unbiased.to(running_var.dtype()), momentum)));
    copy_(num_batches_tracked, add(num_batches_tracked.to(DType::f64), 1.0).to(DType::i64));
  } else {
    mu = running_mean.reshape(channel).to(x.dtype());
    variance = running_var.reshape(channel).to(x.dtype());
  }
  Tensor normalized = mul(sub(x, mu), rsqrt(add(variance, eps)));
  return add(mul(normalized, weight.reshape(channel).to(x.dtype())),
             bias.reshape(channel).to(x.dtype()));
}

}  // namespace qkv::nn
