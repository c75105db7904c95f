// A callback from backward for each leaf whose gradient is complete.
//
// While a PostAccumulateGradHook lives on this thread, Tensor::backward calls `hook(leaf)` for
// each leaf of the graph once its .grad holds everything this backward adds to it: after the last
// node that has the leaf as an input has run (or been skipped, having received no gradient). It is
// PyTorch's register_post_accumulate_grad_hook, for every leaf at once. Data parallelism
// (nn/data_parallel.h) uses it to start reducing a bucket of gradients while backward goes on
// through the earlier layers. qkv::grad (torch.autograd.grad) touches no .grad and calls no hook.
// Implemented by the sweep in engine/autograd.cpp.
#pragma once

#include <functional>

#include "engine/tensor.h"

namespace qkv {

class PostAccumulateGradHook {
 public:
  explicit PostAccumulateGradHook(std::function<void(const Tensor& leaf)> hook);
  ~PostAccumulateGradHook();
  PostAccumulateGradHook(const PostAccumulateGradHook&) = delete;
  PostAccumulateGradHook& operator=(const PostAccumulateGradHook&) = delete;

 private:
  std::function<void(const Tensor&)> previous_;
};

}  // namespace qkv
