// Optimizers over a list of parameters: SGD (momentum, Nesterov, weight decay), Adam, AdamW.
//
// Updates follow PyTorch's formulas exactly, so a hand-computed step (or a PyTorch run) gives the
// same numbers. Adam and AdamW run the backend's fused adam_step kernel. state_dict() holds
// everything a resumed run needs (step count, moment buffers, learning rate) by name, as tensors,
// so it can be written with save_safetensors next to the model's.
#pragma once

#include <vector>

#include "nn/module.h"

namespace qkv::nn {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  // One update from the parameters' current .grad; parameters without a gradient are skipped.
  virtual void step() = 0;
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t steps() const { return step_; }
  const std::vector<Tensor>& params() const { return params_; }

  // "step", "lr" and "state.<i>.<buffer>" for each parameter i.
  StateDict state_dict() const;
  // Throws qkv::Error naming any missing key or shape mismatch.
  void load_state_dict(const StateDict& state);

 protected:
  // Per-parameter buffers by name, e.g. {"exp_avg", "exp_avg_sq"}; created zero-filled.
  std::vector<std::map<std::string, Tensor>> state_;
  std::vector<Tensor> params_;
  double lr_;
  int64_t step_ = 0;
};

struct SGDOptions {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, SGDOptions options = {});
  void step() override;
  SGDOptions options;
};

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};

// Adam: weight decay as L2 (added to the gradient).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, AdamOptions options = {});
  void step() override;
  AdamOptions options;

 protected:
  bool decoupled_ = false;
};

// AdamW (Loshchilov & Hutter): weight decay applied to the parameter, p *= 1 - lr * wd.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3,
        AdamOptions options = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2});
};

// Scales all gradients together so their global L2 norm is at most max_norm; returns the norm
// before clipping (as torch.nn.utils.clip_grad_norm_).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace qkv::nn
