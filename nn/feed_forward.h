// The transformer's position-wise feed-forward block: Linear -> activation -> Dropout -> Linear.
#pragma once

#include "nn/activation.h"
#include "nn/linear.h"

namespace qkv::nn {

class FeedForward : public Layer {
 public:
  FeedForward(int64_t d_model, int64_t dim_feedforward, double dropout = 0.0,
              const std::string& activation = "relu");
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "FeedForward"; }

  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Layer> activation;
  std::shared_ptr<Dropout> dropout;
};

}  // namespace qkv::nn
