#include "nn/checkpoint.h"

#include "engine/error.h"
#include "engine/op_declaration.h"

namespace qkv::nn {

// The backward replays fn and differentiates it once (grad without create_graph).
QKV_RECORDED_OP("checkpoint", "nn", kernel);
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& params) {
  const uint64_t rng_offset = default_generator().offset();
  Tensor output;
  {
    NoGrad no_grad;
    output = fn(inputs);
  }
  if (!grad_enabled()) return output;

  std::vector<Tensor> recorded = inputs;
  for (const Tensor& p : params)
    if (p.requires_grad()) recorded.push_back(p);
  // The closure must not own the inputs' graph history beyond what record() keeps anyway: it
  // captures detached inputs (the values) and the parameters (leaves).
  std::vector<Tensor> saved;
  for (const Tensor& x : inputs) saved.push_back(x.defined() ? x.detach() : x);
  std::vector<bool> wants_grad;
  for (const Tensor& x : inputs) wants_grad.push_back(x.defined() && x.requires_grad());
  std::vector<Tensor> leaves(recorded.begin() + std::ptrdiff_t(inputs.size()), recorded.end());

  return record("checkpoint", recorded, output,
                [fn, saved, wants_grad, leaves, rng_offset](const Tensor& gy) -> grads {
                  // Replay fn on fresh leaves with the forward's random stream.
                  std::vector<Tensor> fresh = saved;
                  std::vector<Tensor> targets;
                  for (size_t i = 0; i < fresh.size(); ++i)
                    if (wants_grad[i]) {
                      fresh[i] = saved[i].detach();
                      fresh[i].requires_grad_(true);
                      targets.push_back(fresh[i]);
                    }
                  for (const Tensor& p : leaves) targets.push_back(p);
                  Generator& gen = default_generator();
                  const uint64_t now = gen.offset();
                  gen.set_offset(rng_offset);
                  Tensor y;
                  {
                    EnableGrad enable;
                    y = fn(fresh);
                  }
                  gen.set_offset(now);
                  grads result(saved.size() + leaves.size());
                  if (targets.empty() || !y.requires_grad()) return result;
                  std::vector<Tensor> g = grad(y, targets, gy);
                  size_t next = 0;
                  for (size_t i = 0; i < saved.size(); ++i)
                    if (wants_grad[i]) result[i] = g[next++];
                  for (size_t j = 0; j < leaves.size(); ++j) result[saved.size() + j] = g[next++];
                  return result;
                });
}

Tensor checkpoint(const Module& module, const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  return checkpoint(fn, inputs, module.parameters());
}

}  // namespace qkv::nn
