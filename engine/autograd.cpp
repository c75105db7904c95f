#include "engine/autograd.h"

#include <cmath>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "engine/autocast.h"
#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/post_accumulate_grad_hook.h"
#include "engine/profiler.h"

namespace qkv {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly = false;
// Inside a backward closure the ops that compute a gradient are not checked one by one: the node
// whose rule they implement is checked as a whole, so the error names 'sqrt', not its 'div'.
thread_local int t_anomaly_paused = 0;
std::mutex g_trace_mutex;
std::set<std::string>* g_trace = nullptr;

struct PauseAnomaly {
  PauseAnomaly() { ++t_anomaly_paused; }
  ~PauseAnomaly() { --t_anomaly_paused; }
};

enum class NonFinite { none, inf, nan };  // nan outranks inf

const char* name_of(NonFinite k) { return k == NonFinite::nan ? "NaN" : "Inf"; }

NonFinite scan(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return NonFinite::none;
  NonFinite found = NonFinite::none;
  for (double v : t.to_vector<double>()) {
    if (std::isnan(v)) return NonFinite::nan;
    if (std::isinf(v)) found = NonFinite::inf;
  }
  return found;
}

// Throws when `output` (produced by `op` from `inputs`) holds a NaN, or an Inf that none of the
// inputs held: see AnomalyMode in autograd.h.
void check_forward(const char* op, const std::vector<Tensor>& inputs, const Tensor& output) {
  PauseAnomaly pause;
  NonFinite out = scan(output);
  if (out == NonFinite::none) return;
  std::string culprit;  // the first input that already held a NaN or Inf, if any
  NonFinite worst_input = NonFinite::none;
  for (size_t i = 0; i < inputs.size(); ++i) {
    NonFinite in = scan(inputs[i]);
    if (in > worst_input) worst_input = in;
    if (in != NonFinite::none && culprit.empty())
      culprit = detail::concat("input ", i, " (shape ", shape_str(inputs[i].shape()),
                               ") already held ", name_of(in));
  }
  if (out == NonFinite::inf && worst_input != NonFinite::none) return;  // passed along
  throw Error(detail::concat("anomaly: op '", op, "' produced ", name_of(out),
                             " in its forward output (shape ", shape_str(output.shape()), ") ",
                             culprit.empty() ? "from finite inputs" : "because its " + culprit));
}

void check_backward(const Node& node, const Tensor& grad_output, const grads& input_grads) {
  PauseAnomaly pause;
  for (size_t i = 0; i < input_grads.size(); ++i) {
    // A rule may compute a gradient for an input that wants none; it is dropped, so ignore it.
    if (i >= node.inputs.size() || !node.inputs[i]) continue;
    NonFinite g = scan(input_grads[i]);
    if (g == NonFinite::none) continue;
    NonFinite in = scan(grad_output);
    throw Error(detail::concat("anomaly: op '", node.op, "' produced ", name_of(g),
                               " in its backward gradient for input ", i, " (shape ",
                               shape_str(input_grads[i].shape()), ") from ",
                               in == NonFinite::none ? "a finite" : std::string("a ") + name_of(in),
                               " output gradient (shape ", shape_str(grad_output.shape()), ")"));
  }
}

}  // namespace

bool anomaly_enabled() { return t_anomaly; }
AnomalyMode::AnomalyMode() : previous_(t_anomaly) { t_anomaly = true; }
AnomalyMode::~AnomalyMode() { t_anomaly = previous_; }

RecordedOps::RecordedOps() {
  std::lock_guard lock(g_trace_mutex);
  g_trace = new std::set<std::string>();
}
RecordedOps::~RecordedOps() {
  std::lock_guard lock(g_trace_mutex);
  delete g_trace;
  g_trace = nullptr;
}
std::vector<std::string> RecordedOps::names() const {
  std::lock_guard lock(g_trace_mutex);
  return {g_trace->begin(), g_trace->end()};
}

bool grad_enabled() { return t_grad_enabled; }
NoGrad::NoGrad() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGrad::~NoGrad() { t_grad_enabled = previous_; }
EnableGrad::EnableGrad() : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGrad::~EnableGrad() { t_grad_enabled = previous_; }

Tensor record(const char* op, const std::vector<Tensor>& inputs, Tensor output, BackwardFn fn) {
  // Every op passes here, recorded or not, so this is the one place anomaly mode needs.
  if (t_anomaly && t_anomaly_paused == 0) check_forward(op, inputs, output);
  const bool profiled = profiling();
  if (profiled) profile_hooks::op_finished(op, inputs, output);
  if (!t_grad_enabled) return output;
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return output;
  const OpDeclaration* declaration = find_declared_op(op);
  QKV_CHECK(declaration, "record", "op '", op, "' is not declared: add QKV_RECORDED_OP(\"", op,
            "\", layer, composed|kernel) beside its definition and a gradcheck case "
            "(docs/TESTING.md)");
  if (g_trace) {
    std::lock_guard lock(g_trace_mutex);
    if (g_trace) g_trace->insert(op);
  }
  auto node = std::make_shared<Node>();
  node->op = op;
  for (const Tensor& t : inputs) {
    bool tracked = t.defined() && t.requires_grad();
    node->inputs.push_back(tracked ? t.impl_ptr() : nullptr);
    node->input_nodes.push_back(tracked ? t.grad_fn() : nullptr);
  }
  node->backward = std::move(fn);
  node->backward_kind = declaration->backward;
  node->output_shape = output.shape();
  node->output_dtype = output.dtype();
  node->autocast_dtype = autocast_dtype();
  if (profiled) {
    node->forward_cost = profile_cost(op, inputs, output);
    node->forward_shapes = shapes_of(inputs);
  }
  // The output may share its TensorImpl with nothing else yet: give it the record in place.
  output.impl()->requires_grad = true;
  output.impl()->grad_fn = std::move(node);
  return output;
}

namespace {

// Nodes reachable from `root`, ordered so that every node comes before the nodes it feeds from
// (reverse topological order of the forward computation).
std::vector<Node*> topo_order(Node* root) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  // iterative DFS (graphs of deep models would overflow the stack recursively)
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  seen.insert(root);
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->input_nodes.size()) {
      Node* child = node->input_nodes[next++].get();
      if (child && seen.insert(child).second) stack.push_back({child, 0});
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  return {order.rbegin(), order.rend()};
}

Tensor accumulate(const Tensor& into, const Tensor& g) { return into.defined() ? add(into, g) : g; }

// Whether the sweep may add into `sum`, the gradient it has gathered so far for a node's output,
// instead of making a new tensor: only the sweep's table holds it and no view shares its memory
// (a rule may return its incoming gradient, or a view of it, for several inputs, as add's does),
// it is dense, and it is not part of a graph being recorded.
bool owns_alone(const Tensor& sum) {
  return sum.impl_ptr().use_count() == 1 && sum.impl()->storage.use_count() == 1 && sum.is_leaf() &&
         !sum.requires_grad() && sum.is_contiguous();
}

// pending[node] += g, in place when the sweep owns the sum alone: an input read by several ops
// (the x of a layer's q, k and v projections and its residual) gets one gradient per reader, and
// a new sum each time would be memory the caching allocator last handed out long ago, cold in
// cache, where the in-place add writes the lines it has just read. Timed as its own backward
// event, which the profile's table shows as accumulate_grad.
void accumulate_pending(Tensor& sum, const Tensor& g, bool create_graph) {
  if (!sum.defined()) {
    sum = g;
    return;
  }
  profile_hooks::BackwardRuleScope profiled;
  if (!create_graph && owns_alone(sum) && sum.dtype() == g.dtype() && sum.device() == g.device())
    sum.backend().binary(BinaryOp::add, sum, g, sum);
  else
    sum = add(sum, g);
  if (profiling()) {  // it reads two tensors and writes one
    const double bytes = 3.0 * double(g.numel()) * double(dtype_size(g.dtype()));
    profiled.finished("accumulate_grad", OpCost{0, bytes}, shape_str(g.shape()));
  }
}

// What the profiler charges a rule: its forward's cost (the profiler scales it), except that a
// rule which hands back its incoming gradient or views of it (add's, a reduction's expand, cat's
// narrows) moves no data, whatever its forward moved.
OpCost backward_cost(const Node& node, const Tensor& g, const grads& input_grads) {
  if (!profiling() || node.forward_cost.flops > 0) return node.forward_cost;
  for (const Tensor& gi : input_grads)
    if (gi.defined() && !gi.same_storage(g)) return node.forward_cost;
  return OpCost{0, 0};
}

thread_local std::function<void(const Tensor&)> t_post_accumulate_hook;

// What gradient_sum_so_far answers from while a rule runs: the node, the sweep's sums, and the
// sums handed out (by input), which the sweep then does not add again. The offer is worked out
// only when a rule asks, off the sweep's path for the rules that never do.
struct RuleContext {
  const Node* node;
  std::unordered_map<Node*, Tensor>* pending;
  const std::unordered_map<TensorImpl*, Tensor*>* capture;
  bool create_graph;
  std::vector<Tensor*> handed;  // empty until a rule takes a sum

  // Whether the rule added its gradient for input i into the sum it was handed, and returned it.
  bool took(size_t i, const Tensor& gi) const {
    return i < handed.size() && handed[i] && gi.impl() == handed[i]->impl();
  }
};
thread_local RuleContext* t_rule = nullptr;

// Sets t_rule for the rule's run.
class RuleScope {
 public:
  explicit RuleScope(RuleContext& context) : saved_(t_rule) { t_rule = &context; }
  ~RuleScope() { t_rule = saved_; }
  RuleScope(const RuleScope&) = delete;
  RuleScope& operator=(const RuleScope&) = delete;

 private:
  RuleContext* saved_;
};

// Tells the post-accumulate hook about each leaf once the last node feeding it has run: for each
// position in the sweep's order, the leaves whose last use it is.
class LeafCompletion {
 public:
  LeafCompletion(const std::vector<Node*>& order, const std::function<void(const Tensor&)>* hook)
      : hook_(hook && *hook ? hook : nullptr) {
    if (!hook_) return;
    // Walking the order from its end, a leaf is first met at its last use.
    std::unordered_set<TensorImpl*> seen;
    done_after_.resize(order.size());
    for (size_t k = order.size(); k-- > 0;)
      for (size_t i = 0; i < order[k]->inputs.size(); ++i) {
        const auto& leaf = order[k]->inputs[i];
        if (leaf && !order[k]->input_nodes[i] && seen.insert(leaf.get()).second)
          done_after_[k].push_back(leaf);
      }
  }
  void finished(size_t k) const {
    if (hook_)
      for (const auto& leaf : done_after_[k]) (*hook_)(Tensor(leaf));
  }

 private:
  const std::function<void(const Tensor&)>* hook_;
  std::vector<std::vector<std::shared_ptr<TensorImpl>>> done_after_;
};

// The sweep shared by backward() and grad(): calls `on_leaf` with each leaf's total gradient.
void sweep(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph,
           const std::function<void(const std::shared_ptr<TensorImpl>&, const Tensor&)>& on_leaf,
           const std::unordered_map<TensorImpl*, Tensor*>* capture = nullptr,
           const std::function<void(const Tensor&)>* post_accumulate = nullptr) {
  QKV_CHECK(root.defined(), "backward", "called on an undefined tensor");
  // A recorded gradient reaches back into the forward graph (its rules read the forward's
  // tensors), so create_graph keeps that graph alive: PyTorch's default, retain_graph=create_graph.
  retain_graph = retain_graph || create_graph;
  QKV_CHECK(root.requires_grad(), "backward",
            "the tensor does not require grad and has no grad_fn (was it computed under NoGrad, "
            "or from inputs that do not require grad?)");
  Tensor seed = gradient;
  if (!seed.defined()) {
    QKV_CHECK(root.numel() == 1, "backward", "grad can be implicitly created only for scalar ",
              "outputs; got shape ", shape_str(root.shape()), " - pass a gradient");
    seed = ones_like(root);
  } else {
    QKV_CHECK(seed.shape() == root.shape(), "backward", "gradient shape ", shape_str(seed.shape()),
              " does not match the output's ", shape_str(root.shape()));
  }
  std::optional<NoGrad> no_grad;
  std::optional<EnableGrad> enable_grad;
  if (create_graph)
    enable_grad.emplace();
  else
    no_grad.emplace();

  if (root.is_leaf()) {
    if (capture && capture->count(root.impl())) *capture->at(root.impl()) = seed;
    on_leaf(root.impl_ptr(), seed);
    if (post_accumulate && *post_accumulate) (*post_accumulate)(root);
    return;
  }
  std::unordered_map<Node*, Tensor> pending;
  pending[root.grad_fn().get()] = seed;
  std::vector<Node*> order = topo_order(root.grad_fn().get());
  LeafCompletion completion(order, post_accumulate);
  for (size_t k = 0; k < order.size(); completion.finished(k++)) {  // also after `continue`
    Node* node = order[k];
    auto it = pending.find(node);
    if (it == pending.end()) continue;  // no gradient reached this node
    Tensor g = std::move(it->second);
    pending.erase(it);
    QKV_CHECK(!node->released, "backward",
              "trying to backward through the graph a second time (through op '", node->op,
              "'); its saved tensors were freed - pass retain_graph=true the first time");
    QKV_CHECK(!create_graph || node->backward_kind == OpBackward::composed, "backward",
              "create_graph through op '", node->op,
              "', whose backward runs raw kernels and cannot be differentiated again (the ops "
              "without a second derivative are listed in docs/ARCHITECTURE.md)");
    grads input_grads;
    Autocast precision(node->autocast_dtype);
    RuleContext context{node, &pending, capture, create_graph, {}};
    profile_hooks::BackwardRuleScope profiled_rule;
    {
      RuleScope in_rule(context);
      if (t_anomaly) {
        {
          PauseAnomaly pause;
          input_grads = node->backward(g);
        }
        check_backward(*node, g, input_grads);
      } else {
        input_grads = node->backward(g);
      }
    }
    profiled_rule.finished(node->op, backward_cost(*node, g, input_grads), node->forward_shapes);
    QKV_CHECK(input_grads.size() == node->inputs.size(), "backward", "op '", node->op,
              "' returned ", input_grads.size(), " gradients for ", node->inputs.size(), " inputs");
    if (!retain_graph) {
      node->backward = nullptr;
      node->released = true;
    }
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const auto& input = node->inputs[i];
      if (!input || !input_grads[i].defined()) continue;
      const Tensor& gi = input_grads[i];
      QKV_CHECK(gi.shape() == input->shape, "backward", "op '", node->op,
                "' produced a gradient of shape ", shape_str(gi.shape()), " for input ", i,
                " of shape ", shape_str(input->shape));
      if (capture && capture->count(input.get())) {
        Tensor* slot = capture->at(input.get());
        *slot = accumulate(*slot, gi);
      }
      if (context.took(i, gi)) continue;  // the rule added it into the sum
      if (Node* next = node->input_nodes[i].get())
        accumulate_pending(pending[next], gi, create_graph);
      else
        on_leaf(input, gi);
    }
  }
}

}  // namespace

// None when a graph is recorded, for a leaf, for an input grad() captures, or for a sum another
// handle or a view shares (accumulate_pending's in-place test).
Tensor* gradient_sum_so_far(size_t input) {
  RuleContext* rule = t_rule;
  if (!rule || rule->create_graph || input >= rule->node->inputs.size()) return nullptr;
  Node* next = rule->node->input_nodes[input].get();
  const auto& leaf = rule->node->inputs[input];
  if (!next || !leaf || (rule->capture && rule->capture->count(leaf.get()))) return nullptr;
  auto it = rule->pending->find(next);
  if (it == rule->pending->end() || !it->second.defined() || !owns_alone(it->second))
    return nullptr;
  if (rule->handed.empty()) rule->handed.resize(rule->node->inputs.size(), nullptr);
  return rule->handed[input] = &it->second;
}

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph,
                  bool create_graph) {
  ProfileScope profiled("backward", ProfilePhase::backward);
  sweep(
      root, gradient, retain_graph, create_graph,
      [&](const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
        Tensor old(leaf->grad);
        // A fresh tensor each time: the caller may hold the previous .grad.
        Tensor total = old.defined() ? add(old, g) : (create_graph ? g : g.detach());
        leaf->grad = total.impl_ptr();
      },
      nullptr, &t_post_accumulate_hook);
}

PostAccumulateGradHook::PostAccumulateGradHook(std::function<void(const Tensor&)> hook)
    : previous_(std::exchange(t_post_accumulate_hook, std::move(hook))) {}
PostAccumulateGradHook::~PostAccumulateGradHook() { t_post_accumulate_hook = std::move(previous_); }

std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                         const Tensor& gradient, bool retain_graph, bool create_graph) {
  std::vector<Tensor> result(inputs.size());
  std::unordered_map<TensorImpl*, Tensor*> capture;
  for (size_t i = 0; i < inputs.size(); ++i) {
    QKV_CHECK(inputs[i].requires_grad(), "grad", "input ", i, " does not require grad");
    capture[inputs[i].impl()] = &result[i];
  }
  sweep(
      output, gradient, retain_graph, create_graph,
      [](const std::shared_ptr<TensorImpl>&, const Tensor&) {},  // .grad stays untouched
      &capture);
  return result;
}

std::string to_dot(const Tensor& root) {
  std::ostringstream dot;
  dot << "digraph qkv {\n  rankdir=BT;\n  node [fontname=\"monospace\"];\n";
  if (!root.grad_fn()) {
    dot << "  leaf [shape=ellipse, label=\"leaf " << shape_str(root.shape()) << "\"];\n}\n";
    return dot.str();
  }
  std::unordered_map<const void*, int> ids;
  auto id = [&](const void* p) {
    auto [it, inserted] = ids.emplace(p, int(ids.size()));
    return it->second;
  };
  for (Node* node : topo_order(root.grad_fn().get())) {
    int n = id(node);
    dot << "  n" << n << " [shape=box, label=\"" << node->op << "\\n"
        << shape_str(node->output_shape) << "\"];\n";
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      if (!node->inputs[i]) continue;
      if (Node* in = node->input_nodes[i].get()) {
        dot << "  n" << id(in) << " -> n" << n << ";\n";
      } else {
        const void* leaf = node->inputs[i].get();
        bool first = !ids.count(leaf);
        int l = id(leaf);
        if (first)
          dot << "  n" << l << " [shape=ellipse, style=filled, fillcolor=lightblue, label=\"leaf "
              << shape_str(node->inputs[i]->shape) << "\"];\n";
        dot << "  n" << l << " -> n" << n << ";\n";
      }
    }
  }
  dot << "}\n";
  return dot.str();
}

}  // namespace qkv
