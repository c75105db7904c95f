#include "engine/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "engine/error.h"

namespace qkv {

namespace detail {
std::atomic<bool> g_profiling{false};
}

namespace {

using Clock = std::chrono::steady_clock;

std::mutex g_mutex;  // guards the fields below while a profiler lives
std::vector<ProfileEvent> g_events;
Clock::time_point g_start;
uint64_t g_generation = 0;  // which profiler a thread's mark belongs to

// Per issuing thread: where the previous op (or scope) ended, and what is being run.
thread_local int64_t t_last_mark_ns = 0;
thread_local uint64_t t_mark_generation = 0;
thread_local ProfilePhase t_phase = ProfilePhase::forward;
thread_local int t_inside_op = 0;  // ops inside a backward rule or an op belong to its event

void add_event(ProfileEvent e) {
  std::lock_guard lock(g_mutex);
  g_events.push_back(std::move(e));
}

// The time the previous op on this thread ended, or the profiler's start for a thread that has
// issued nothing since it began.
int64_t last_mark_ns() {
  if (t_mark_generation != g_generation) {
    t_mark_generation = g_generation;
    t_last_mark_ns = 0;
  }
  return t_last_mark_ns;
}

void set_mark(int64_t ns) {
  t_mark_generation = g_generation;
  t_last_mark_ns = ns;
}

double bytes_of(const Tensor& t) {
  return t.defined() ? double(t.numel()) * double(dtype_size(t.dtype())) : 0;
}

bool is(const std::string& op, const char* name) { return op == name; }

// How much a backward rule does, as a multiple of its forward's cost (see profiler.h).
double backward_factor(const std::string& op) {
  // Attention's backward recomputes the scores and runs four more products: five against two.
  if (is(op, "efficient_attention") || is(op, "efficient_attention_packed")) return 2.5;
  // Dropout's reads the gradient and the mask and writes one tensor, as its forward does.
  if (is(op, "dropout")) return 1.0;
  // gelu_dropout's reads the gradient, x and the mask and writes one tensor: float32's 13 bytes an
  // element against the forward's 9 (float64's 25 against 17 is within 2% of that).
  if (is(op, "gelu_dropout")) return 13.0 / 9.0;
  // dropout_add's reads the gradient and the mask and writes x's (the residual's is the gradient
  // itself): 9 bytes an element in float32 against the forward's 13 (x and the residual read, y
  // and the mask written; float64's 17 against 25 is within 2% of that).
  if (is(op, "dropout_add")) return 9.0 / 13.0;
  // add_relu's reads the gradient and the output and writes one tensor (both inputs get it), as
  // its forward reads a and b and writes y.
  if (is(op, "add_relu")) return 1.0;
  // The sweep's own gradient sums are charged what they do, not a forward's.
  if (is(op, "accumulate_grad")) return 1.0;
  return 2.0;
}

}  // namespace

const char* phase_name(ProfilePhase phase) {
  switch (phase) {
    case ProfilePhase::forward:
      return "forward";
    case ProfilePhase::backward:
      return "backward";
    case ProfilePhase::optimizer:
      return "optimizer";
    case ProfilePhase::other:
      break;
  }
  return "other";
}

std::string shapes_of(const std::vector<Tensor>& tensors) {
  std::string text;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!text.empty()) text += ' ';
    text += shape_str(t.shape());
  }
  return text;
}

OpCost profile_cost(const std::string& op, const std::vector<Tensor>& inputs,
                    const Tensor& output) {
  OpCost cost;
  auto in = [&](size_t i) -> const Tensor& { return inputs.at(i); };
  const double out = output.defined() ? double(output.numel()) : 0;
  if (is(op, "matmul") && inputs.size() == 2 && in(0).dim() >= 1) {
    cost.flops = 2 * out * double(in(0).shape().back());  // each output sums K products
  } else if ((is(op, "linear") || is(op, "linear_relu")) && inputs.size() >= 2 &&
             in(1).dim() == 2) {
    cost.flops = 2 * out * double(in(1).shape()[1]);  // weight [out, in]
  } else if (is(op, "conv2d") && inputs.size() >= 2 && in(1).dim() == 4 && in(1).shape()[0] > 0) {
    cost.flops = 2 * out * double(in(1).numel() / in(1).shape()[0]);  // Cin/groups x kh x kw
  } else if (is(op, "efficient_attention") && inputs.size() == 3 && in(0).dim() >= 2 &&
             in(1).dim() >= 2 && in(2).dim() >= 1) {
    const double d = double(in(0).shape().back()), dv = double(in(2).shape().back());
    const double rows = d > 0 ? double(in(0).numel()) / d : 0;  // queries x leading dims
    const double keys = double(in(1).shape()[size_t(in(1).dim() - 2)]);
    cost.flops = 2 * rows * keys * (d + dv);  // q k^T, then the weights times v
  } else if (is(op, "efficient_attention_packed") && inputs.size() == 1 && output.dim() == 4) {
    // qkv [B, T, 3E] -> [B, H, T, d]: self-attention, T keys for each of B H T queries
    const double d = double(output.shape().back()), keys = double(output.shape()[2]);
    cost.flops = d > 0 ? 2 * (out / d) * keys * (d + d) : 0;
  }
  if (cost.flops == 0) {
    // A view moves nothing; anything else reads its inputs and writes its output once.
    bool view = false;
    for (const Tensor& t : inputs)
      view = view || (t.defined() && output.defined() && t.same_storage(output));
    if (!view) {
      for (const Tensor& t : inputs) cost.bytes += bytes_of(t);
      cost.bytes += bytes_of(output);
      // and dropout writes its mask for the backward (one byte per element on the CPU)
      if (is(op, "dropout") || is(op, "gelu_dropout") || is(op, "dropout_add")) cost.bytes += out;
    }
  }
  return cost;
}

Profiler::Profiler() {
  std::lock_guard lock(g_mutex);
  QKV_CHECK(!detail::g_profiling.load(), "Profiler", "a profiler is already running");
  g_events.clear();
  g_start = Clock::now();
  ++g_generation;
  detail::g_profiling.store(true, std::memory_order_release);
}

Profiler::~Profiler() { detail::g_profiling.store(false); }

std::vector<ProfileEvent> Profiler::events() const {
  std::vector<ProfileEvent> events;
  {
    std::lock_guard lock(g_mutex);
    events = g_events;
  }
  // By start; a scope before the events it encloses, which may start at the same instant.
  std::stable_sort(events.begin(), events.end(), [](const ProfileEvent& a, const ProfileEvent& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.duration_ns > b.duration_ns;
  });
  return events;
}

ProfileScope::ProfileScope(const char* name, ProfilePhase phase)
    : name_(name), phase_(phase), outer_phase_(t_phase) {
  if (!profiling()) return;
  start_ns_ = profile_hooks::now_ns();
  // Work before the scope is not the scope's first op's.
  set_mark(start_ns_);
  t_phase = phase;
}

ProfileScope::~ProfileScope() {
  t_phase = outer_phase_;
  if (start_ns_ < 0 || !profiling()) return;
  const int64_t end = profile_hooks::now_ns();
  set_mark(end);
  ProfileEvent e;
  e.name = name_;
  e.phase = phase_;
  e.start_ns = start_ns_;
  e.duration_ns = end - start_ns_;
  e.scope = true;
  add_event(std::move(e));
}

namespace profile_hooks {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - g_start).count();
}

namespace {

// The op's event, from the end of the previous op or scope on this thread to `end`.
void add_op_event(const char* op, int64_t end, OpCost cost, std::string shapes) {
  const int64_t start = std::min(last_mark_ns(), end);
  set_mark(end);
  ProfileEvent e;
  e.name = op;
  e.phase = t_phase;
  e.start_ns = start;
  e.duration_ns = end - start;
  e.flops = cost.flops;
  e.bytes = cost.bytes;
  e.shapes = std::move(shapes);
  add_event(std::move(e));
}

}  // namespace

void op_finished(const char* op, const std::vector<Tensor>& inputs, const Tensor& output) {
  if (!profiling() || t_inside_op > 0) return;
  const int64_t end = now_ns();
  add_op_event(op, end, profile_cost(op, inputs, output), shapes_of(inputs));
}

void op_finished(const char* op, OpCost cost, std::string shapes) {
  if (!profiling() || t_inside_op > 0) return;
  add_op_event(op, now_ns(), cost, std::move(shapes));
}

BackwardRuleScope::BackwardRuleScope() : start_ns_(profiling() ? now_ns() : -1) { ++t_inside_op; }

BackwardRuleScope::~BackwardRuleScope() { --t_inside_op; }

OpInternalsScope::OpInternalsScope() { ++t_inside_op; }
OpInternalsScope::~OpInternalsScope() { --t_inside_op; }

void BackwardRuleScope::finished(const std::string& op, OpCost forward_cost,
                                 const std::string& shapes) {
  if (start_ns_ < 0 || !profiling()) return;
  const int64_t end = now_ns();
  set_mark(end);
  ProfileEvent e;
  e.name = op;
  e.phase = ProfilePhase::backward;
  e.start_ns = start_ns_;
  e.duration_ns = end - start_ns_;
  e.flops = forward_cost.flops * backward_factor(op);
  e.bytes = forward_cost.bytes * backward_factor(op);
  e.shapes = shapes;
  add_event(std::move(e));
}

void chunk_finished(int thread, int64_t start_ns) {
  if (!profiling()) return;
  ProfileEvent e;
  e.name = "chunk";
  e.phase = ProfilePhase::other;
  e.thread = thread;
  e.start_ns = start_ns;
  e.duration_ns = now_ns() - start_ns;
  add_event(std::move(e));
}

}  // namespace profile_hooks
}  // namespace qkv
