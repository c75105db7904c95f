#include "nn/module.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "engine/error.h"

namespace qkv::nn {

namespace {

void check_new_name(const std::string& name, const char* what) {
  QKV_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module", "bad ", what, " name '",
            name, "' (non-empty, no dots)");
}

std::string with_prefix(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

Tensor& Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name, "parameter");
  QKV_CHECK(value.defined(), "Module", "parameter '", name, "' is undefined");
  value.requires_grad_(true);
  parameters_.emplace_back(name, value);
  return parameters_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name, "buffer");
  buffers_.emplace_back(name, value);
  return buffers_.back().second;
}

void Module::set_parameter(const std::string& name, Tensor value) {
  for (auto& [n, t] : parameters_)
    if (n == name) {
      value.requires_grad_(true);
      t = value;
      return;
    }
  throw Error("Module::set_parameter: no parameter named '" + name + "'");
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "submodule");
  QKV_CHECK(module != nullptr, "Module", "submodule '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool buffers,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_)
    if (t.defined()) out.emplace_back(with_prefix(prefix, name), t);
  for (const auto& [name, child] : children_)
    child->collect(with_prefix(prefix, name), buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, out);
  // A parameter shared by two modules (tied embeddings) is listed once, under its first name.
  std::set<TensorImpl*> seen;
  std::vector<std::pair<std::string, Tensor>> unique;
  for (auto& p : out)
    if (seen.insert(p.second.impl()).second) unique.push_back(std::move(p));
  return unique;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (Tensor t : parameters()) t.zero_grad();
}

namespace {

// Points t's TensorImpl at `converted`'s data, so every handle sharing that impl sees the change.
void rebind(const Tensor& t, const Tensor& converted) {
  if (converted.impl() == t.impl()) return;
  Tensor c = converted.contiguous();
  TensorImpl* impl = t.impl();
  impl->storage = c.impl()->storage;
  impl->offset = c.offset();
  impl->shape = c.shape();
  impl->strides = c.strides();
  impl->dtype = c.dtype();
  impl->grad.reset();
}

}  // namespace

void Module::to(DType dtype) {
  NoGrad no_grad;
  for (auto& [name, t] : named_parameters()) rebind(t, t.detach().to(dtype));
  for (auto& [name, t] : named_buffers())
    if (is_floating(t.dtype())) rebind(t, t.detach().to(dtype));
}

void Module::to(Device device) {
  NoGrad no_grad;
  for (auto& [name, t] : named_parameters()) rebind(t, t.detach().to(device));
  for (auto& [name, t] : named_buffers()) rebind(t, t.detach().to(device));
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, t] : named_parameters()) out[name] = t.detach();
  for (auto& [name, t] : named_buffers()) out[name] = t.detach();
  return out;
}

namespace {

// No weight or buffer of a trained model is NaN or Inf: one that is would poison every output it
// reaches, so a file holding one is damaged, not merely unusual.
void require_finite(const std::string& name, const Tensor& t) {
  if (!is_floating(t.dtype())) return;
  const std::vector<double> values = t.to(Device::cpu()).to(DType::f64).to_vector<double>();
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      throw Error("load_state_dict: tensor '" + name + "' holds " +
                  (std::isnan(values[i]) ? "NaN" : "Inf") + " (element " + std::to_string(i) +
                  " of " + std::to_string(values.size()) + "): the weights are damaged");
}

}  // namespace

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end())
      missing.push_back(name);
    else if (it->second.shape() != t.shape())
      mismatched.push_back(name + " (checkpoint " + shape_str(it->second.shape()) + ", model " +
                           shape_str(t.shape()) + ")");
  }
  for (const auto& [name, t] : state)
    if (!own.count(name)) unexpected.push_back(name);
  // A model of another width mismatches in every tensor: three names say enough, the count the
  // rest.
  auto join = [](const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < std::min<size_t>(names.size(), 3); ++i)
      s += (s.empty() ? "" : ", ") + names[i];
    if (names.size() > 3) s += " and " + std::to_string(names.size() - 3) + " more";
    return s;
  };
  bool bad = !mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (bad) {
    std::ostringstream msg;
    msg << "load_state_dict:";
    if (!missing.empty()) msg << " missing keys: " << join(missing) << ";";
    if (!unexpected.empty()) msg << " unexpected keys: " << join(unexpected) << ";";
    if (!mismatched.empty()) msg << " shape mismatches: " << join(mismatched) << ";";
    throw Error(msg.str());
  }
  NoGrad no_grad;
  for (const auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    require_finite(name, it->second);
    Tensor src = it->second;
    if (src.dtype() != t.dtype()) src = src.to(t.dtype());
    if (src.device() != t.device()) src = src.to(t.device());
    copy_(t, src);
  }
}

void Module::summary_lines(const std::string& name, int depth, std::string& out) const {
  std::string indent(2 * depth, ' ');
  int64_t total = 0;
  for (const auto& [n, t] : named_parameters()) total += t.numel();
  out += indent + (name.empty() ? "" : name + ": ") + describe() + "  [" + std::to_string(total) +
         " params]\n";
  for (const auto& [n, t] : parameters_)
    if (t.defined())
      out += indent + "  ." + n + " " + shape_str(t.shape()) + " = " + std::to_string(t.numel()) +
             "\n";
  for (const auto& [n, t] : buffers_)
    if (t.defined()) out += indent + "  ." + n + " " + shape_str(t.shape()) + " (buffer)\n";
  for (const auto& [n, child] : children_) child->summary_lines(n, depth + 1, out);
}

std::string Module::summary() const {
  std::string out;
  summary_lines("", 0, out);
  out += "total parameters: " + std::to_string(num_parameters()) + "\n";
  return out;
}

}  // namespace qkv::nn
