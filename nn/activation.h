// Parameter-free layers: ReLU, GELU, Dropout (active only in training mode), Identity.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

class ReLU : public Layer {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string describe() const override { return "ReLU"; }
};

class GELU : public Layer {
 public:
  explicit GELU(GeluApprox approximate = GeluApprox::none) : approximate(approximate) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string describe() const override { return "GELU"; }
  GeluApprox approximate;
};

class Identity : public Layer {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string describe() const override { return "Identity"; }
};

class Dropout : public Layer {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  // residual + forward(x), a residual block's sum: one dropout_add op (one pass over memory) when
  // training; a subclass runs its own forward, then the add.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  std::string describe() const override { return "Dropout(p=" + std::to_string(p) + ")"; }
  double p;
};

// Builds "relu" or "gelu" by name (a config's activation field).
std::shared_ptr<Layer> make_activation(const std::string& name);

}  // namespace qkv::nn
