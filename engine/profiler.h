// The profiler: where a training step's time goes, op by op, and what every thread does.
//
// While a Profiler lives, every op is timed as it passes record() (engine/autograd.h), every
// backward node as backward() runs its rule, and every chunk a pool worker runs
// (engine/parallel.h) as an event of that worker's track. An op's forward time is the time since
// the previous op (or scope) finished on the calling thread: ops run one after another there, and
// all of an op's work - checks, kernel, allocation - happens before it calls record(). The glue
// between two ops (a module's few lines of C++) is counted with the op after it.
//
// Each event carries the arithmetic it did, estimated from its shapes (profile_cost): FLOPs for
// the products (matmul, linear, convolution, attention), bytes moved for the rest, so the table
// prints GFLOP/s for the first and GB/s for the second. A backward node is charged twice its
// forward's cost: a product's backward is two products of the same size (one per operand), and an
// elementwise rule reads about twice what its forward did. Dropout's is charged once: it reads the
// gradient and the mask and writes one tensor, as its forward reads x and writes y and the mask;
// add_relu's once too: it reads the gradient and the output and writes one tensor, which both
// inputs receive; gelu_dropout's 13/9 of it: it reads the gradient, x and the mask and writes
// one tensor, where its forward reads x and writes y and the mask; dropout_add's 9/13: it reads
// the gradient and the mask and writes x's, where its forward reads x and the residual and writes
// y and the mask.
//
// Off (the default) it costs one atomic load per op (a plain load on x86).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace qkv {

enum class ProfilePhase : uint8_t { forward, backward, optimizer, other };
const char* phase_name(ProfilePhase phase);

struct ProfileEvent {
  std::string name;  // the op ("matmul"), "chunk" for a worker's share of a kernel, or a scope's
  ProfilePhase phase = ProfilePhase::other;
  int thread = 0;  // 0: the thread that issues the ops; 1, 2, ...: the pool's workers
  int64_t start_ns = 0, duration_ns = 0;  // from the profiler's start
  double flops = 0, bytes = 0;            // work estimated from the shapes (see above)
  std::string shapes;                     // the inputs' shapes, "[64,20,128] [128,128]"
  bool scope = false;                     // a ProfileScope's span, enclosing other events
};

// The work an op does, from its name and its inputs' and output's shapes: FLOPs for products
// (2 per multiply-add), bytes read and written for everything else (flops = 0 then).
struct OpCost {
  double flops = 0, bytes = 0;
};
OpCost profile_cost(const std::string& op, const std::vector<Tensor>& inputs, const Tensor& output);

namespace detail {
extern std::atomic<bool> g_profiling;
}
// Acquire: a thread that sees the flag set also sees the profiler's start time and generation.
inline bool profiling() { return detail::g_profiling.load(std::memory_order_acquire); }

// One profile at a time, process-wide. Events are kept in memory until the profiler ends.
class Profiler {
 public:
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // The events so far, ordered by start time.
  std::vector<ProfileEvent> events() const;
};

// A named span on the calling thread (an optimizer step, a whole training step). Ops inside it are
// timed as usual; the scope's own event covers them all.
class ProfileScope {
 public:
  ProfileScope(const char* name, ProfilePhase phase);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  const char* name_;
  ProfilePhase phase_;
  int64_t start_ns_ = -1;  // -1: the profiler was off when the scope began
  ProfilePhase outer_phase_;
};

// The hooks the engine calls; each returns at once when profiling is off.
namespace profile_hooks {
// record(): `op` has just produced `output` from `inputs` on this thread.
void op_finished(const char* op, const std::vector<Tensor>& inputs, const Tensor& output);
// The same for work that is not an op (the optimizer's fused kernels, engine/backend.h): its cost
// and the shapes to show are given.
void op_finished(const char* op, OpCost cost, std::string shapes);
int64_t now_ns();  // since the profiler started
// backward(): lives while a node's rule runs; the ops the rule calls are part of its event.
class BackwardRuleScope {
 public:
  BackwardRuleScope();
  ~BackwardRuleScope();
  // The rule of `op` is done; `forward_cost` and `shapes` were its forward's.
  void finished(const std::string& op, OpCost forward_cost, const std::string& shapes);

 private:
  int64_t start_ns_;
};
// An op built from other ops (conv2d on Backend's default: a matmul and a bias add on im2col
// columns): while it lives, the ops called on this thread are part of the enclosing op's event,
// which record() makes when the scope has ended. Without it the inner matmul would take the
// product's FLOPs a second time and the op's own event only the time after the last inner op.
class OpInternalsScope {
 public:
  OpInternalsScope();
  ~OpInternalsScope();
  OpInternalsScope(const OpInternalsScope&) = delete;
  OpInternalsScope& operator=(const OpInternalsScope&) = delete;
};
// The pool: worker `thread` ran a chunk from start_ns to now.
void chunk_finished(int thread, int64_t start_ns);
}  // namespace profile_hooks

// "[2,3] [3,4]": the shapes of the defined tensors, for an event's `shapes`.
std::string shapes_of(const std::vector<Tensor>& tensors);

}  // namespace qkv
