// What one case of the PyTorch parity driver reads and writes (tests/torch/, docs/TESTING.md).
//
// The Python side writes one safetensors file per case: the module's parameters (and buffers, if
// it sets them) under "param.<name>", the inputs under "in.<name>", for each output an upstream
// gradient "gout.<name>", and the configuration as metadata strings ("dtype" is "f64" or "f32").
// The case builds the qkv module, runs it, and the driver writes back "out.<name>" for every
// output and, after backward of sum over outputs of (output * gout), "grad.<param name>" and
// "grad.in.<input name>" for every parameter and floating input that received a gradient.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/safetensors.h"

namespace qkv::parity {

class Case {
 public:
  Case(std::string name, nn::SafetensorsFile file);

  const std::string name;
  DType dtype;  // of every floating tensor and module

  // ---- configuration (metadata); a missing key without a default is an error naming it
  bool has_meta(const std::string& key) const { return file_.metadata.count(key) > 0; }
  std::string text(const std::string& key) const;
  std::string text(const std::string& key, const std::string& fallback) const;
  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  double number(const std::string& key) const;
  double number(const std::string& key, double fallback) const;
  bool flag(const std::string& key, bool fallback = false) const;

  // ---- tensors
  bool has(const std::string& key) const { return file_.tensors.count(key) > 0; }
  // The tensor stored under `key`, floating ones converted to dtype; missing is an error.
  Tensor tensor(const std::string& key) const;
  // "in.<name>": a floating one becomes a leaf that requires grad (its gradient is written as
  // grad.in.<name>); ids and bool masks come back as stored.
  Tensor input(const std::string& name);
  // "in.<name>" as stored (floating ones in dtype) and without a gradient if the file has it,
  // else an undefined tensor: an optional mask.
  Tensor optional_mask(const std::string& name) const;

  // Converts `module` to dtype and copies every "param.*" tensor into it. Every parameter must be
  // in the file and every "param.*" key must name a parameter or buffer; a buffer the file leaves
  // out keeps the value the module computed (the sinusoid table). The module's parameters are
  // the ones backward() reports.
  void load(nn::Module& module);

  // Writes out.<name>; when the file has gout.<name>, sum(value * gout) joins the loss.
  void output(const std::string& name, const Tensor& value);
  // A result under its full key ("final.<param>", "step3.p0").
  void write(const std::string& key, const Tensor& value);
  // Backward of the loss the outputs built, then grad.<...> (or `prefix`<...>) for the loaded
  // module's parameters and the inputs; clears those gradients and the loss afterwards.
  void backward(const std::string& prefix = "grad.");

  const nn::TensorMap& results() const { return results_; }

 private:
  const std::string& meta(const std::string& key) const;

  nn::SafetensorsFile file_;
  nn::TensorMap results_;
  std::vector<std::pair<std::string, Tensor>> inputs_;
  nn::Module* module_ = nullptr;
  Tensor loss_;
};

}  // namespace qkv::parity
