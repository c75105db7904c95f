// Optimizers over parameter groups: SGD (momentum, Nesterov, weight decay), Adam, AdamW.
//
// The semantics are torch.optim's (PyTorch 1.13), so a hand-computed step or a PyTorch run on the
// same weights gives the same numbers:
// - Parameter groups (torch's param_groups): each group has its own lr and weight_decay; a plain
//   list of parameters is one group with the optimizer's. A parameter may be in one group only.
// - State is per parameter: the number of updates it received (a parameter whose .grad is
//   undefined at a step() is skipped and does not count, so Adam's bias correction starts at its
//   own first gradient) and its buffers (Adam's moments; SGD's momentum buffer, which starts as
//   the parameter's first gradient).
// - Hyper-parameters out of range throw at construction, as torch's ValueError does.
// Adam and AdamW run the backend's fused step, one call for all of a backend's parameters
// (adam_steps, as torch's foreach=True takes them; each element as adam_step computes it).
//
// state_dict() holds what a resumed run needs, as tensors by name, so it is written with
// save_safetensors next to the model's:
//   param_groups.<g>.lr, param_groups.<g>.weight_decay   float64 [1]
//   param_groups.<g>.params                               int64 [n]: the group's parameter indices
//   state.<i>.step                                        int64 [1]: updates parameter i received
//   state.<i>.<buffer>                                    exp_avg, exp_avg_sq / momentum_buffer
// where i counts the parameters of all groups in order (as torch numbers them).
#pragma once

#include <optional>
#include <vector>

#include "nn/module.h"

namespace qkv::nn {

// What a caller passes per group; an unset value takes the optimizer's default.
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

class Optimizer {
 public:
  struct Group {
    std::vector<Tensor> params;
    double lr;
    double weight_decay;
    double initial_lr;  // lr at construction: what scale_lr multiplies
  };

  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, std::string name);
  virtual ~Optimizer() = default;
  // One update from the parameters' current .grad; parameters without a gradient are skipped.
  virtual void step() = 0;
  // Leaves every .grad undefined: torch's zero_grad(set_to_none=True). torch 1.13's default
  // (set_to_none=False) fills zeros instead, which makes step() update those parameters.
  void zero_grad();

  // torch's param_groups: a group's lr and weight_decay may be changed between steps; its params
  // are fixed at construction (they index the per-parameter state).
  std::vector<Group>& param_groups() { return groups_; }
  const std::vector<Group>& param_groups() const { return groups_; }
  // The first group's lr (what a log shows; the groups of the trainers share it).
  double lr() const;
  // Every group's lr becomes `lr`.
  void set_lr(double lr);
  // Every group's lr becomes its initial_lr * factor: what torch's LambdaLR does with the factor
  // of the current step, so groups keep their ratios under a schedule.
  void scale_lr(double factor);
  // All parameters, group after group (the order of the indices in state_dict()).
  const std::vector<Tensor>& params() const { return params_; }
  // How many updates parameter i (an index into params()) has received.
  int64_t step_count(size_t i) const;

  StateDict state_dict() const;
  // Restores the per-parameter state and each group's lr and weight_decay (initial_lr stays the
  // construction's). Every key is checked before anything is copied: a missing key, a shape
  // mismatch or groups that differ throw qkv::Error naming the key, and the optimizer is unchanged.
  //
  // A state saved before parameter groups existed ("step", "lr", "state.<j>.<buffer>", one global
  // step count) loads as well: the global count becomes every parameter's count, "lr" every
  // group's lr. Its j counted the parameters in the order that optimizer was given them;
  // `legacy_order` is that order when it differs from params() (empty: the same).
  void load_state_dict(const StateDict& state, const std::vector<Tensor>& legacy_order = {});

 protected:
  struct ParamState {
    int64_t step = 0;
    std::map<std::string, Tensor> buffers;  // created zero-filled by the subclass's constructor
  };

  // Calls update(group, i, param, grad) for each parameter with a gradient, group by group, after
  // counting the update in state_[i].step.
  template <typename Update>
  void for_each_gradient(Update update) {
    size_t i = 0;
    for (const Group& group : groups_)
      for (const Tensor& p : group.params) {
        Tensor g = p.grad();
        if (g.defined()) {
          ++state_[i].step;
          update(group, i, p, g);
        }
        ++i;
      }
  }
  // Throws "<name>: invalid <what> <value> (<rule>)" unless ok.
  void check_hyper(bool ok, const char* what, double value, const char* rule) const;

  std::string name_;
  std::vector<Group> groups_;
  std::vector<Tensor> params_;
  std::vector<ParamState> state_;  // by index into params_

 private:
  void load_legacy_state(const StateDict& state, const std::vector<Tensor>& legacy_order);
};

struct SGDOptions {
  double momentum = 0, dampening = 0, weight_decay = 0;  // weight_decay: the groups' default
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, SGDOptions options = {});
  SGD(std::vector<ParamGroup> groups, double lr, SGDOptions options = {});
  void step() override;
  SGDOptions options;
};

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;  // weight_decay: the default
};

// Adam: weight decay as L2 (added to the gradient).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, AdamOptions options = {});
  Adam(std::vector<ParamGroup> groups, double lr = 1e-3, AdamOptions options = {});
  void step() override;
  AdamOptions options;

 protected:
  Adam(std::vector<ParamGroup> groups, double lr, AdamOptions options, bool decoupled,
       std::string name);
  bool decoupled_ = false;
};

// AdamW (Loshchilov & Hutter): weight decay applied to the parameter, p *= 1 - lr * wd, before the
// Adam update; torch's default weight_decay 0.01.
class AdamW : public Adam {
 public:
  static constexpr AdamOptions kDefaults{
      .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2};
  AdamW(std::vector<Tensor> params, double lr = 1e-3, AdamOptions options = kDefaults);
  AdamW(std::vector<ParamGroup> groups, double lr = 1e-3, AdamOptions options = kDefaults);
};

// Scales all gradients together so their global L2 norm is at most max_norm: each gradient is
// multiplied by min(1, max_norm / (norm + 1e-6)); returns the norm before clipping. As
// torch.nn.utils.clip_grad_norm_ (norm_type 2). Each gradient's squares are taken in its own
// dtype, as torch's norm takes them, but summed in float64 (torch rounds each gradient's norm and
// the total to float32): the backend's sum_of_squares and scale_, one call per backend's list.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace qkv::nn
