#include "engine/autograd.h"

#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "engine/error.h"
#include "engine/ops.h"

namespace qkv {

namespace {
thread_local bool t_grad_enabled = true;
std::mutex g_trace_mutex;
std::set<std::string>* g_trace = nullptr;
}  // namespace

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
  if (!t_grad_enabled) return output;
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return output;
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
  node->output_shape = output.shape();
  node->output_dtype = output.dtype();
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

// The sweep shared by backward() and grad(): calls `on_leaf` with each leaf's total gradient.
void sweep(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph,
           const std::function<void(const std::shared_ptr<TensorImpl>&, const Tensor&)>& on_leaf,
           const std::unordered_map<TensorImpl*, Tensor*>* capture = nullptr) {
  QKV_CHECK(root.defined(), "backward", "called on an undefined tensor");
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
    return;
  }
  std::unordered_map<Node*, Tensor> pending;
  pending[root.grad_fn().get()] = seed;
  for (Node* node : topo_order(root.grad_fn().get())) {
    auto it = pending.find(node);
    if (it == pending.end()) continue;  // no gradient reached this node
    Tensor g = std::move(it->second);
    pending.erase(it);
    QKV_CHECK(!node->released, "backward",
              "trying to backward through the graph a second time (through op '", node->op,
              "'); its saved tensors were freed - pass retain_graph=true the first time");
    grads input_grads = node->backward(g);
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
      if (Node* next = node->input_nodes[i].get())
        pending[next] = accumulate(pending[next], gi);
      else
        on_leaf(input, gi);
    }
  }
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph,
                  bool create_graph) {
  sweep(root, gradient, retain_graph, create_graph,
        [&](const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
          Tensor old(leaf->grad);
          // A fresh tensor each time: the caller may hold the previous .grad.
          Tensor total = old.defined() ? add(old, g) : (create_graph ? g : g.detach());
          leaf->grad = total.impl_ptr();
        });
}

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
