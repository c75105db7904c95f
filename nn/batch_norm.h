// BatchNorm2d(num_features, eps, momentum): per-channel normalization of [B, C, H, W].
//
// Training normalizes with the batch's statistics and folds them into running_mean / running_var
// (running = (1 - momentum) * running + momentum * batch, the variance unbiased, as PyTorch);
// eval normalizes with the running statistics, so a single example gives a deterministic answer.
// The forward is one recorded batch_norm op (engine/ops.h), whose backward is the closed form.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) in one kernel each way (engine's batch_norm_relu).
  Tensor forward_relu(const Tensor& x);
  std::string describe() const override {
    return "BatchNorm2d(" + std::to_string(num_features) + ")";
  }

  int64_t num_features;
  double eps, momentum;
  Tensor weight, bias;                                    // [C] ones, zeros
  Tensor running_mean, running_var, num_batches_tracked;  // buffers

 private:
  Tensor normalize(const Tensor& x, bool relu);
};

}  // namespace qkv::nn
