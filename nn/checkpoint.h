// Gradient checkpointing (Chen et al., 2016): trade compute for memory.
//
// checkpoint(fn, inputs, params) runs fn without recording a graph, so none of fn's intermediate
// activations outlive the forward pass; it records one node that keeps only fn's inputs. When the
// backward sweep reaches that node it runs fn again with recording on, over detached copies of the
// inputs, and back-propagates the incoming gradient through that fresh graph to the inputs and to
// `params`. Peak memory of a stack of N checkpointed layers drops from N layers' activations to
// one layer's (plus N layer inputs).
//
// Randomness is replayed: the default generator's offset at the forward call is saved and restored
// for the recomputation (then put back), so dropout draws the same masks both times and the
// gradients are those of the forward that actually ran.
//
// Contract: every tensor fn reads that needs a gradient must come in through `inputs` (activations)
// or `params` (leaves such as a module's parameters). A tensor captured any other way gets no
// gradient through the checkpoint. Second-order gradients (create_graph) are not supported.
#pragma once

#include <functional>
#include <vector>

#include "engine/ops.h"
#include "nn/module.h"

namespace qkv::nn {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& params);

// The usual case: fn is (part of) `module`'s forward, so its parameters are the leaves.
Tensor checkpoint(const Module& module, const CheckpointFn& fn, const std::vector<Tensor>& inputs);

}  // namespace qkv::nn
