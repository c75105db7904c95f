#include "nn/optim.h"

#include <cmath>

#include "engine/backend.h"
#include "engine/error.h"

namespace qkv::nn {

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : state_(params.size()), params_(std::move(params)), lr_(lr) {
  for (size_t i = 0; i < params_.size(); ++i)
    QKV_CHECK(params_[i].defined() && params_[i].requires_grad() && params_[i].is_leaf(),
              "Optimizer", "parameter ", i, " is not a leaf that requires grad");
}

void Optimizer::zero_grad() {
  for (Tensor p : params_) p.zero_grad();
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  out["step"] = tensor_i64({step_}, {1});
  out["lr"] = tensor({lr_}, {1}, {DType::f64});
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [name, t] : state_[i])
      out["state." + std::to_string(i) + "." + name] = t.detach().clone();
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  auto get = [&](const std::string& key) {
    auto it = state.find(key);
    QKV_CHECK(it != state.end(), "Optimizer::load_state_dict", "missing key '", key, "'");
    return it->second;
  };
  step_ = int64_t(get("step").item());
  lr_ = get("lr").to(DType::f64).item();
  NoGrad no_grad;
  for (size_t i = 0; i < state_.size(); ++i)
    for (auto& [name, t] : state_[i]) {
      std::string key = "state." + std::to_string(i) + "." + name;
      Tensor src = get(key);
      QKV_CHECK(src.shape() == t.shape(), "Optimizer::load_state_dict", "'", key, "' has shape ",
                shape_str(src.shape()), ", expected ", shape_str(t.shape()));
      copy_(t, src.to(t.dtype()).to(t.device()));
    }
}

SGD::SGD(std::vector<Tensor> params, double lr, SGDOptions o)
    : Optimizer(std::move(params), lr), options(o) {
  QKV_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD",
            "nesterov needs momentum > 0 and zero dampening");
  if (o.momentum != 0)
    for (size_t i = 0; i < params_.size(); ++i)
      state_[i]["momentum_buffer"] = zeros_like(params_[i]);
}

void SGD::step() {
  NoGrad no_grad;
  ++step_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (options.weight_decay != 0) g = add(g, mul(p, options.weight_decay));
    if (options.momentum != 0) {
      Tensor& buf = state_[i]["momentum_buffer"];
      // PyTorch starts the buffer at the first gradient itself (no dampening on step 1).
      Tensor next = step_ == 1 ? g : add(mul(buf, options.momentum), mul(g, 1 - options.dampening));
      copy_(buf, next);
      g = options.nesterov ? add(g, mul(buf, options.momentum)) : buf;
    }
    copy_(p, sub(p, mul(g, lr_)));
  }
}

Adam::Adam(std::vector<Tensor> params, double lr, AdamOptions o)
    : Optimizer(std::move(params), lr), options(o) {
  for (size_t i = 0; i < params_.size(); ++i) {
    QKV_CHECK(params_[i].is_contiguous(), "Adam", "parameter ", i, " is not contiguous");
    state_[i]["exp_avg"] = zeros_like(params_[i]);
    state_[i]["exp_avg_sq"] = zeros_like(params_[i]);
  }
}

void Adam::step() {
  NoGrad no_grad;
  ++step_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    p.backend().adam_step(p, g.contiguous(), state_[i]["exp_avg"], state_[i]["exp_avg_sq"], lr_,
                          options.beta1, options.beta2, options.eps, options.weight_decay,
                          decoupled_, step_);
  }
}

AdamW::AdamW(std::vector<Tensor> params, double lr, AdamOptions o)
    : Adam(std::move(params), lr, o) {
  decoupled_ = true;
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGrad no_grad;
  double total_sq = 0;
  for (const Tensor& p : params)
    if (p.grad().defined()) total_sq += sum(square(p.grad().to(DType::f64))).item();
  double norm = std::sqrt(total_sq);
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for (const Tensor& p : params)
      if (p.grad().defined()) copy_(p.grad(), mul(p.grad(), coef));
  return norm;
}

}  // namespace qkv::nn
