// nn::Module: the base of every layer and model.
//
// A module owns named parameters (trainable leaves), buffers (state that is saved but not trained,
// such as BatchNorm's running mean) and submodules. Registration is what makes the rest work:
// named_parameters() walks the tree and builds dotted names ("encoder.layers.0.self_attn.q_proj.
// weight"), state_dict() is parameters and buffers by those names, and train()/eval() reach every
// submodule. Tensors are shared handles, so the member a layer keeps (`weight`) and the registered
// entry are the same tensor; load_state_dict copies into it in place.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/ops.h"

namespace qkv::nn {

using StateDict = std::map<std::string, Tensor>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration ---------------------------------------------------------------------------
  // Registers `value` as a trainable parameter (sets requires_grad) and returns it.
  Tensor& register_parameter(const std::string& name, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor value);
  // Replaces a registered parameter's handle (weight tying); the caller updates its member too.
  void set_parameter(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // ---- traversal ------------------------------------------------------------------------------
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const {
    return children_;
  }
  int64_t num_parameters() const;

  // ---- mode -----------------------------------------------------------------------------------
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad();

  // Converts every parameter and floating buffer in place (the handles layers keep stay valid):
  // float64 for gradcheck, another device for training there.
  void to(DType dtype);
  void to(Device device);

  // ---- checkpoints ----------------------------------------------------------------------------
  StateDict state_dict() const;
  // Copies every entry into the module's tensors. With strict, any missing key, unexpected key or
  // shape mismatch throws one qkv::Error listing all of them by name; nothing is copied then.
  void load_state_dict(const StateDict& state, bool strict = true);

  // A readable tree: one line per module with its parameters' shapes and counts.
  std::string summary() const;
  // The module's type, for summary() ("Linear(16 -> 32)").
  virtual std::string describe() const { return "Module"; }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, bool buffers,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  void summary_lines(const std::string& name, int depth, std::string& out) const;

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// A module with one tensor in and one out (activations, Linear, conv blocks): what Sequential
// holds.
class Layer : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

}  // namespace qkv::nn
