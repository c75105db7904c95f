#include "nn/optim.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/profiler.h"

namespace qkv::nn {

namespace {

// Bytes a kernel reads or writes once over these tensors, for the profiler's GB/s.
double bytes_of(const std::vector<Tensor>& xs) {
  double bytes = 0;
  for (const Tensor& x : xs) bytes += double(x.numel()) * double(dtype_size(x.dtype()));
  return bytes;
}

}  // namespace

namespace {

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

std::string group_key(size_t g, const char* field) {
  return "param_groups." + std::to_string(g) + "." + field;
}

std::string state_key(size_t i, const std::string& field) {
  return "state." + std::to_string(i) + "." + field;
}

Tensor scalar_f64(double v) { return tensor({v}, {1}, {DType::f64}); }

// Reads a one-element tensor as a double.
double scalar_of(const Tensor& t, const std::string& key) {
  QKV_CHECK(t.numel() == 1, "Optimizer::load_state_dict", "'", key, "' has shape ",
            shape_str(t.shape()), ", expected one value");
  return t.to(DType::f64).item();
}

int64_t count_of(const Tensor& t, const std::string& key) {
  double v = scalar_of(t, key);
  QKV_CHECK(v >= 0 && v == std::floor(v), "Optimizer::load_state_dict", "'", key, "' is ", v,
            ", expected a count (a non-negative integer)");
  return int64_t(v);
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay,
                     std::string name)
    : name_(std::move(name)) {
  check_hyper(lr >= 0, "learning rate", lr, ">= 0");
  check_hyper(weight_decay >= 0, "weight_decay", weight_decay, ">= 0");
  std::set<TensorImpl*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& in = groups[g];
    Group group{.params = std::move(in.params),
                .lr = in.lr.value_or(lr),
                .weight_decay = in.weight_decay.value_or(weight_decay),
                .initial_lr = 0};
    group.initial_lr = group.lr;
    check_hyper(group.lr >= 0, "learning rate", group.lr, ">= 0");
    check_hyper(group.weight_decay >= 0, "weight_decay", group.weight_decay, ">= 0");
    for (const Tensor& p : group.params) {
      QKV_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), name_, "parameter ",
                params_.size(), " is not a leaf that requires grad");
      QKV_CHECK(seen.insert(p.impl()).second, name_, "parameter ", params_.size(), " (group ", g,
                ") is already in the optimizer; a parameter belongs to one group only");
      params_.push_back(p);
    }
    groups_.push_back(std::move(group));
  }
  state_.resize(params_.size());
}

void Optimizer::check_hyper(bool ok, const char* what, double value, const char* rule) const {
  QKV_CHECK(ok, name_, "invalid ", what, " ", value, " (must be ", rule, ")");
}

void Optimizer::zero_grad() {
  for (Tensor p : params_) p.zero_grad();
}

double Optimizer::lr() const { return groups_.empty() ? 0 : groups_[0].lr; }

void Optimizer::set_lr(double lr) {
  for (Group& g : groups_) g.lr = lr;
}

void Optimizer::scale_lr(double factor) {
  for (Group& g : groups_) g.lr = g.initial_lr * factor;
}

int64_t Optimizer::step_count(size_t i) const {
  QKV_CHECK(i < state_.size(), name_, "parameter index ", i, " out of range for ", state_.size(),
            " parameters");
  return state_[i].step;
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  size_t i = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<int64_t> indices;
    for (size_t k = 0; k < groups_[g].params.size(); ++k) indices.push_back(int64_t(i++));
    out[group_key(g, "lr")] = scalar_f64(groups_[g].lr);
    out[group_key(g, "weight_decay")] = scalar_f64(groups_[g].weight_decay);
    out[group_key(g, "params")] = tensor_i64(indices, {int64_t(indices.size())});
  }
  for (size_t p = 0; p < state_.size(); ++p) {
    out[state_key(p, "step")] = tensor_i64({state_[p].step}, {1});
    for (const auto& [name, t] : state_[p].buffers) out[state_key(p, name)] = t.detach().clone();
  }
  return out;
}

namespace {

const Tensor& get(const StateDict& state, const std::string& key) {
  auto it = state.find(key);
  QKV_CHECK(it != state.end(), "Optimizer::load_state_dict", "missing key '", key, "'");
  return it->second;
}

// The saved buffer for `key`, checked against the live one and converted to its dtype/device.
Tensor buffer_from(const StateDict& state, const std::string& key, const Tensor& live) {
  const Tensor& src = get(state, key);
  QKV_CHECK(src.shape() == live.shape(), "Optimizer::load_state_dict", "'", key, "' has shape ",
            shape_str(src.shape()), ", expected ", shape_str(live.shape()));
  return src.to(live.dtype()).to(live.device());
}

}  // namespace

void Optimizer::load_state_dict(const StateDict& state, const std::vector<Tensor>& legacy_order) {
  if (state.count("step") && !state.count(group_key(0, "lr"))) {
    load_legacy_state(state, legacy_order);
    return;
  }
  QKV_CHECK(!state.count(group_key(groups_.size(), "lr")), "Optimizer::load_state_dict",
            "the state has more than the ", groups_.size(), " parameter groups of this ", name_);
  // Everything is read and checked into these first; the optimizer changes only at the end.
  std::vector<std::pair<double, double>> group_values;  // lr, weight_decay
  size_t first = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string key = group_key(g, "params");
    std::vector<int64_t> saved = get(state, key).to(DType::i64).to_vector<int64_t>();
    std::vector<int64_t> expected;
    for (size_t k = 0; k < groups_[g].params.size(); ++k) expected.push_back(int64_t(first + k));
    QKV_CHECK(saved == expected, "Optimizer::load_state_dict", "'", key, "' holds ", saved.size(),
              " parameters from index ", saved.empty() ? 0 : saved[0], "; group ", g, " of this ",
              name_, " has ", expected.size(), " from index ", first);
    first += expected.size();
    group_values.emplace_back(
        scalar_of(get(state, group_key(g, "lr")), group_key(g, "lr")),
        scalar_of(get(state, group_key(g, "weight_decay")), group_key(g, "weight_decay")));
  }
  std::vector<ParamState> loaded(state_.size());
  for (size_t p = 0; p < state_.size(); ++p) {
    loaded[p].step = count_of(get(state, state_key(p, "step")), state_key(p, "step"));
    for (const auto& [name, live] : state_[p].buffers)
      loaded[p].buffers[name] = buffer_from(state, state_key(p, name), live);
  }
  NoGrad no_grad;
  for (size_t g = 0; g < groups_.size(); ++g)
    std::tie(groups_[g].lr, groups_[g].weight_decay) = group_values[g];
  for (size_t p = 0; p < state_.size(); ++p) {
    state_[p].step = loaded[p].step;
    for (auto& [name, live] : state_[p].buffers) copy_(live, loaded[p].buffers[name]);
  }
}

void Optimizer::load_legacy_state(const StateDict& state, const std::vector<Tensor>& order) {
  const char* op = "Optimizer::load_state_dict";
  // index_of[j] = the index in params_ of the parameter the old optimizer numbered j.
  std::vector<size_t> index_of(params_.size());
  if (order.empty()) {
    for (size_t j = 0; j < params_.size(); ++j) index_of[j] = j;
  } else {
    QKV_CHECK(order.size() == params_.size(), op, "the single-group state's order has ",
              order.size(), " parameters, this ", name_, " has ", params_.size());
    for (size_t j = 0; j < order.size(); ++j) {
      size_t i = 0;
      while (i < params_.size() && params_[i].impl() != order[j].impl()) ++i;
      QKV_CHECK(i < params_.size(), op, "parameter ", j,
                " of the single-group state's order is "
                "not in this ",
                name_);
      index_of[j] = i;
    }
  }
  const int64_t step = count_of(get(state, "step"), "step");
  const double lr = scalar_of(get(state, "lr"), "lr");
  std::vector<std::map<std::string, Tensor>> loaded(params_.size());
  for (size_t j = 0; j < params_.size(); ++j)
    for (const auto& [name, live] : state_[index_of[j]].buffers)
      loaded[index_of[j]][name] = buffer_from(state, state_key(j, name), live);
  NoGrad no_grad;
  set_lr(lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    state_[i].step = step;
    for (auto& [name, live] : state_[i].buffers) copy_(live, loaded[i][name]);
  }
}

// ---- SGD ---------------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, double lr, SGDOptions o)
    : SGD(one_group(std::move(params)), lr, o) {}

SGD::SGD(std::vector<ParamGroup> groups, double lr, SGDOptions o)
    : Optimizer(std::move(groups), lr, o.weight_decay, "SGD"), options(o) {
  check_hyper(o.momentum >= 0, "momentum", o.momentum, ">= 0");
  QKV_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD",
            "nesterov needs momentum > 0 and zero dampening");
  if (o.momentum != 0)
    for (size_t i = 0; i < params_.size(); ++i)
      state_[i].buffers["momentum_buffer"] = zeros_like(params_[i]);
}

void SGD::step() {
  NoGrad no_grad;
  for_each_gradient([&](const Group& group, size_t i, const Tensor& p, Tensor g) {
    if (group.weight_decay != 0) g = add(g, mul(p, group.weight_decay));
    if (options.momentum != 0) {
      Tensor& buf = state_[i].buffers["momentum_buffer"];
      // The buffer starts as the parameter's first gradient (no dampening then), as in torch.
      Tensor next =
          state_[i].step == 1 ? g : add(mul(buf, options.momentum), mul(g, 1 - options.dampening));
      copy_(buf, next);
      g = options.nesterov ? add(g, mul(buf, options.momentum)) : buf;
    }
    copy_(p, sub(p, mul(g, group.lr)));
  });
}

namespace {

// The list in `lists` for `backend`, appended empty the first time: the optimizer's fused
// kernels take one call per device's list.
template <typename Item>
std::vector<Item>& list_for(std::vector<std::pair<Backend*, std::vector<Item>>>& lists,
                            Backend* backend) {
  auto list =
      std::find_if(lists.begin(), lists.end(), [&](const auto& l) { return l.first == backend; });
  if (list == lists.end()) list = lists.insert(lists.end(), {backend, {}});
  return list->second;
}

// The profiler's shapes for a list of tensors taken in one call: "[36 tensors]".
std::string list_shape(const std::vector<Tensor>& xs) {
  std::string shape = "[";
  shape += std::to_string(xs.size());
  shape += " tensors]";
  return shape;
}

}  // namespace

// ---- Adam, AdamW -------------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, double lr, AdamOptions o)
    : Adam(one_group(std::move(params)), lr, o, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, double lr, AdamOptions o)
    : Adam(std::move(groups), lr, o, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, double lr, AdamOptions o, bool decoupled,
           std::string name)
    : Optimizer(std::move(groups), lr, o.weight_decay, std::move(name)),
      options(o),
      decoupled_(decoupled) {
  check_hyper(o.eps >= 0, "eps", o.eps, ">= 0");
  check_hyper(o.beta1 >= 0 && o.beta1 < 1, "beta1", o.beta1, "in [0, 1)");
  check_hyper(o.beta2 >= 0 && o.beta2 < 1, "beta2", o.beta2, "in [0, 1)");
  for (size_t i = 0; i < params_.size(); ++i) {
    QKV_CHECK(params_[i].is_contiguous(), name_, "parameter ", i, " is not contiguous");
    state_[i].buffers["exp_avg"] = zeros_like(params_[i]);
    state_[i].buffers["exp_avg_sq"] = zeros_like(params_[i]);
  }
}

void Adam::step() {
  NoGrad no_grad;
  // The parameters by backend, each list one call of the backend's multi-tensor step.
  std::vector<std::pair<Backend*, std::vector<Backend::AdamParameter>>> lists;
  for_each_gradient([&](const Group& group, size_t i, const Tensor& p, const Tensor& g) {
    auto& buffers = state_[i].buffers;
    // Bias correction by the parameter's own step count (torch's state['step']).
    list_for(lists, &p.backend())
        .push_back({p, g.contiguous(), buffers["exp_avg"], buffers["exp_avg_sq"], group.lr,
                    group.weight_decay, state_[i].step});
  });
  for (const auto& [backend, parameters] : lists) {
    backend->adam_steps(parameters, options.beta1, options.beta2, options.eps, decoupled_);
    // Reads the parameter, gradient and both moments; writes all but the gradient.
    std::vector<Tensor> params;
    for (const Backend::AdamParameter& a : parameters) params.push_back(a.param);
    profile_hooks::op_finished("adam_step", {.bytes = 7 * bytes_of(params)}, list_shape(params));
  }
}

AdamW::AdamW(std::vector<Tensor> params, double lr, AdamOptions o)
    : Adam(one_group(std::move(params)), lr, o, true, "AdamW") {}

AdamW::AdamW(std::vector<ParamGroup> groups, double lr, AdamOptions o)
    : Adam(std::move(groups), lr, o, true, "AdamW") {}

// ---- clip_grad_norm_ ---------------------------------------------------------------------------

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGrad no_grad;
  // The gradients by backend, each list one call of the backend's fused kernels.
  std::vector<std::pair<Backend*, std::vector<Tensor>>> lists;
  for (const Tensor& p : params) {
    if (p.grad().defined()) list_for(lists, &p.grad().backend()).push_back(p.grad());
  }
  double total_sq = 0;
  for (const auto& [backend, grads] : lists) {
    total_sq += backend->sum_of_squares(grads);
    profile_hooks::op_finished("sum_of_squares", {.bytes = bytes_of(grads)}, list_shape(grads));
  }
  double norm = std::sqrt(total_sq);
  double coef = max_norm / (norm + 1e-6);
  // !(coef >= 1) rather than coef < 1: a NaN norm spreads NaN into every gradient, as in torch.
  if (!(coef >= 1))
    for (const auto& [backend, grads] : lists) {
      backend->scale_(grads, coef);
      profile_hooks::op_finished("scale_", {.bytes = 2 * bytes_of(grads)}, list_shape(grads));
    }
  return norm;
}

}  // namespace qkv::nn
