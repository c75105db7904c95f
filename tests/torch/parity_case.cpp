#include "tests/torch/parity_case.h"

#include <cstdlib>

#include "engine/error.h"

namespace qkv::parity {

namespace {

DType dtype_of(const nn::SafetensorsFile& file, const std::string& case_name) {
  auto it = file.metadata.find("dtype");
  const std::string name = it == file.metadata.end() ? "f64" : it->second;
  QKV_CHECK(name == "f64" || name == "f32", case_name, "metadata 'dtype' must be f64 or f32, got '",
            name, "'");
  return name == "f64" ? DType::f64 : DType::f32;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

Case::Case(std::string case_name, nn::SafetensorsFile file)
    : name(std::move(case_name)), dtype(dtype_of(file, name)), file_(std::move(file)) {}

const std::string& Case::meta(const std::string& key) const {
  auto it = file_.metadata.find(key);
  QKV_CHECK(it != file_.metadata.end(), name, "missing metadata '", key, "'");
  return it->second;
}

std::string Case::text(const std::string& key) const { return meta(key); }

std::string Case::text(const std::string& key, const std::string& fallback) const {
  return has_meta(key) ? meta(key) : fallback;
}

int64_t Case::integer(const std::string& key) const {
  const std::string& s = meta(key);
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  QKV_CHECK(!s.empty() && *end == '\0', name, "metadata '", key, "' is not an integer: '", s, "'");
  return int64_t(v);
}

int64_t Case::integer(const std::string& key, int64_t fallback) const {
  return has_meta(key) ? integer(key) : fallback;
}

double Case::number(const std::string& key) const {
  const std::string& s = meta(key);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  QKV_CHECK(!s.empty() && *end == '\0', name, "metadata '", key, "' is not a number: '", s, "'");
  return v;
}

double Case::number(const std::string& key, double fallback) const {
  return has_meta(key) ? number(key) : fallback;
}

bool Case::flag(const std::string& key, bool fallback) const {
  if (!has_meta(key)) return fallback;
  const std::string& s = meta(key);
  QKV_CHECK(s == "0" || s == "1", name, "metadata '", key, "' must be 0 or 1, got '", s, "'");
  return s == "1";
}

Tensor Case::tensor(const std::string& key) const {
  auto it = file_.tensors.find(key);
  QKV_CHECK(it != file_.tensors.end(), name, "missing tensor '", key, "'");
  const Tensor& t = it->second;
  return is_floating(t.dtype()) && t.dtype() != dtype ? t.to(dtype) : t;
}

Tensor Case::input(const std::string& input_name) {
  Tensor t = tensor("in." + input_name);
  if (!is_floating(t.dtype())) return t;
  t = t.detach().clone();
  t.requires_grad_(true);
  inputs_.emplace_back(input_name, t);
  return t;
}

Tensor Case::optional_mask(const std::string& input_name) const {
  return has("in." + input_name) ? tensor("in." + input_name) : Tensor();
}

void Case::load(nn::Module& module) {
  module.to(dtype);
  const nn::StateDict own = module.state_dict();
  nn::StateDict given;
  for (const auto& [key, t] : file_.tensors) {
    if (!starts_with(key, "param.")) continue;
    const std::string entry = key.substr(6);
    QKV_CHECK(own.count(entry), name, "'", key, "' names no parameter or buffer of the module");
    given[entry] = t;
  }
  for (const auto& [entry, t] : module.named_parameters())
    QKV_CHECK(given.count(entry), name, "missing tensor 'param.", entry, "'");
  module.load_state_dict(given, /*strict=*/false);
  module_ = &module;
}

void Case::write(const std::string& key, const Tensor& value) {
  results_[key] = value.detach().clone();  // a snapshot: buffers and parameters change later
}

void Case::output(const std::string& output_name, const Tensor& value) {
  write("out." + output_name, value);
  const std::string key = "gout." + output_name;
  if (!has(key)) return;
  Tensor term = sum(mul(value, tensor(key)));
  loss_ = loss_.defined() ? add(loss_, term) : term;
}

void Case::backward(const std::string& prefix) {
  QKV_CHECK(loss_.defined(), name, "backward without any output that has a gout.* tensor");
  loss_.backward();
  loss_ = Tensor();
  if (module_)
    for (auto [entry, p] : module_->named_parameters())
      if (p.grad().defined()) {
        write(prefix + entry, p.grad());
        p.zero_grad();
      }
  for (auto& [input_name, t] : inputs_)
    if (t.grad().defined()) {
      write(prefix + "in." + input_name, t.grad());
      t.zero_grad();
    }
}

}  // namespace qkv::parity
