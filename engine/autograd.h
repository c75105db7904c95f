// Define-by-run reverse-mode autograd.
//
// Every differentiable op computes its output, then calls record(): if gradients are enabled and
// some input requires them, record() attaches a Node to the output holding the op's name, its
// inputs' nodes and a closure that maps the output's gradient to the inputs' gradients. The closure
// is written right beside the forward computation, so the rule sits next to what it differentiates:
//
//   Tensor exp(const Tensor& x) {
//     Tensor y = unary_kernel(UnaryOp::exp, x);
//     return record("exp", {x}, y, [y = y.detach()](const Tensor& gy) {
//       return grads{mul(gy, y)};
//     });
//   }
//
// A closure must capture the op's *output* detached (y.detach()), never the output itself: the
// output owns the node, and the node owning the output would be a reference cycle.
//
// backward() sorts the graph topologically from the root, sweeps it once in reverse, and adds each
// leaf's gradient into its .grad (gradients accumulate across calls, as in PyTorch; zero them
// between steps). Unless retain_graph is set, every node's closure is released as it runs, freeing
// saved tensors; a second backward through a released node throws.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/op_declaration.h"
#include "engine/profiler.h"
#include "engine/tensor.h"

namespace qkv {

using grads = std::vector<Tensor>;  // one gradient per input; undefined = no gradient
using BackwardFn = std::function<grads(const Tensor& grad_output)>;

struct Node {
  std::string op;
  std::vector<std::shared_ptr<TensorImpl>> inputs;  // kept for leaves and for to_dot
  std::vector<std::shared_ptr<Node>> input_nodes;   // inputs[i]'s grad_fn (null for leaves)
  BackwardFn backward;                              // released after use unless retained
  // From the op's declaration: a kernel backward cannot be differentiated (create_graph throws).
  OpBackward backward_kind = OpBackward::composed;
  Shape output_shape;
  DType output_dtype = DType::f32;
  // The autocast dtype (engine/autocast.h) the forward ran under; the backward runs under it too,
  // so a product computed in bfloat16 has its gradient products computed in bfloat16.
  DType autocast_dtype = DType::f32;
  bool released = false;
  // Filled only while a Profiler lives (engine/profiler.h): the forward's cost and input shapes,
  // which the backward rule's event is charged by.
  OpCost forward_cost;
  std::string forward_shapes;
};

// Attaches the autograd record to `output` and returns it. Inputs that do not require grad get
// no gradient (their entries in the closure's result are ignored). `op` must be declared with
// QKV_RECORDED_OP (engine/op_declaration.h): recording an undeclared name throws qkv::Error.
Tensor record(const char* op, const std::vector<Tensor>& inputs, Tensor output, BackwardFn fn);

// While a backward rule runs in a sweep that records no graph: the sum of the gradients that
// input i of the node has received so far from the rules already run, where the sweep alone holds
// it (no other handle, no view of its memory, dense, and not captured by grad()), so that the rule
// may add its own gradient into it; null otherwise, and outside a rule. A rule that does so returns
// that same tensor as input i's gradient, and the sweep does not add it again: one pass over the
// memory where a gradient written by the rule and then added by the sweep took two (CBAM's pools,
// whose input also feeds a product). Sums in the same order as the sweep's: sum + gradient.
Tensor* gradient_sum_so_far(size_t input);

// While a RecordedOps guard lives, the names of all ops recorded (on any thread) are collected;
// the op-registry test uses it to check that a case named after an op does record that op.
class RecordedOps {
 public:
  RecordedOps();
  ~RecordedOps();
  std::vector<std::string> names() const;
};

// Anomaly mode (PyTorch's detect_anomaly): while an AnomalyMode guard lives on this thread, every
// op that passes record() has its floating output scanned, and in backward every node's input
// gradients are scanned, and the first NaN/Inf throws qkv::Error naming the op:
//   "anomaly: op 'log' produced NaN in its forward output (shape [4,8]) from finite inputs"
// A forward output is flagged when it holds NaN, or holds +-Inf while none of its inputs did
// (attention masks place -inf on purpose; an op that only passes one along is not the culprit).
// Off (the default) it costs one thread-local load per op: scanning copies tensors to the host.
bool anomaly_enabled();

class AnomalyMode {
 public:
  AnomalyMode();
  ~AnomalyMode();
  AnomalyMode(const AnomalyMode&) = delete;
  AnomalyMode& operator=(const AnomalyMode&) = delete;

 private:
  bool previous_;
};

// Whether ops record a graph on this thread.
bool grad_enabled();

// RAII guard: no graph is recorded while it lives (inference, optimizer updates).
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

// RAII guard that turns recording back on (used inside backward with create_graph).
class EnableGrad {
 public:
  EnableGrad();
  ~EnableGrad();

 private:
  bool previous_;
};

// The sweep behind Tensor::backward. `gradient` defaults to 1 for a one-element root.
void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph);

// Gradients of `output` with respect to `inputs` without touching any .grad (torch.autograd.grad).
// With create_graph the gradients are recorded in turn, so they can be differentiated again (and
// the graph is retained whatever retain_graph says, as in PyTorch, since they reach into it); a
// graph holding an op whose backward runs raw kernels (declared `kernel`) throws qkv::Error naming
// that op rather than return a gradient whose own derivative would be silently wrong.
std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                         const Tensor& gradient = Tensor(), bool retain_graph = false,
                         bool create_graph = false);

// The graph behind `root` in Graphviz DOT: one box per op, one ellipse per leaf with its shape.
std::string to_dot(const Tensor& root);

}  // namespace qkv
