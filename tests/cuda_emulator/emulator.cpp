// The emulator's scheduler: the CUDA threads of a block as fibers, and the barriers between them.
//
// A launch walks its blocks in order. A block's threads run on fibers (each with its own stack,
// context_switch.h): a fiber runs a thread until it returns, then takes the next thread not started
// yet, so a kernel without barriers needs one fiber per block. A thread that reaches a barrier
// parks its fiber; the scheduler then runs the others, and when every thread a barrier waits for
// has arrived it makes them runnable again. When nothing can run and threads still wait, the
// kernel misused a barrier: the launch fails with a message saying which and where.
#include "tests/cuda_emulator/emulator.h"

#include <sys/mman.h>

#include <algorithm>
#include <memory>
#include <new>
#include <sstream>
#include <vector>

#include "tests/cuda_emulator/context_switch.h"
#include "tests/cuda_emulator/internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define QKV_EMULATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QKV_EMULATOR_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define QKV_EMULATOR_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QKV_EMULATOR_TSAN 1
#endif
#endif
#ifdef QKV_EMULATOR_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef QKV_EMULATOR_TSAN
#include <sanitizer/tsan_interface.h>
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace qkv::cuda_emulator {

namespace {

// What sm_90 allows.
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockZ = 64;
constexpr unsigned kMaxGridYZ = 65535;
constexpr size_t kMaxSharedBytes = 227 * 1024;

// Kernels keep little on the stack; sanitizers need more (redzones). The page below each stack
// is a guard: an overflow faults instead of corrupting the neighbour.
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;

enum class State { not_started, runnable, at_block_barrier, at_warp_barrier, finished };

struct Thread {
  State state = State::not_started;
  const char* barrier = nullptr;  // the collective it waits at
  std::source_location where;
  unsigned mask = 0;  // of a warp collective
  struct Fiber* fiber = nullptr;
};

struct Fiber {
  MachineContext context;
  unsigned char* mapping = nullptr;  // guard page + stack
  int thread = -1;                   // the CUDA thread it runs now
  void* tsan_fiber = nullptr;
  Fiber() {
    mapping =
        static_cast<unsigned char*>(mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (mapping == MAP_FAILED) throw std::bad_alloc();
    mprotect(mapping, kGuardBytes, PROT_NONE);
#ifdef QKV_EMULATOR_TSAN
    tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  ~Fiber() {
#ifdef QKV_EMULATOR_TSAN
    __tsan_destroy_fiber(tsan_fiber);
#endif
    munmap(mapping, kGuardBytes + kStackBytes);
  }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  unsigned char* stack() const { return mapping + kGuardBytes; }
};

struct Block {
  dim3 grid, dim;
  uint3 index;
  KernelBody body;
  std::vector<Thread> threads;
  std::vector<LaneExchange> exchange;  // one slot per thread
  unsigned char* shared = nullptr;
  size_t shared_bytes = 0;
  bool reverse = false;  // the order threads are started and resumed in
  // When >= 0, this warp lags: in every stretch between two __syncthreads it goes part of the
  // way (`lag` sixths of the warp collectives the previous block counted there), then waits
  // until every other warp has gone as far as it can, so writes early in a stretch and reads
  // late in it are far apart.
  int lagging_warp = -1;
  int lag = 3;                           // how far it goes, in sixths of the stretch
  std::vector<int> stretch_collectives;  // per stretch of the previous block, warp 0's count
  int stretch = 0, collectives = 0;      // where this block is
  int started = 0;
  std::string error;         // the first failure
  std::vector<Fiber*> idle;  // fibers free to take threads
};

// Fibers outlive launches: a kernel with barriers needs one per thread, and creating a stack
// (mmap) per thread and launch would dominate the run time.
thread_local std::vector<std::unique_ptr<Fiber>> fiber_pool;
thread_local Block* block_now = nullptr;
thread_local Fiber* fiber_now = nullptr;

// Where fibers switch back to: the host thread running the launch. Per host thread, not per
// launch, since an idle fiber parked in one launch is resumed in a later one.
struct Scheduler {
  MachineContext context;
  void* tsan_fiber = nullptr;
  const void* stack = nullptr;  // for ASan's fiber bookkeeping
  size_t stack_size = 0;
};
thread_local Scheduler scheduler;

// Thrown in a CUDA thread once its launch has failed: unwinding its stack frees what its frames
// hold (an error message being built, say) before the fiber is reused.
struct KernelAbort {};

uint3 unflatten(unsigned linear, dim3 dim) {
  return {linear % dim.x, linear / dim.x % dim.y, linear / (dim.x * dim.y)};
}

void set_builtins(const Block& b, int thread) {
  threadIdx = unflatten(unsigned(thread), b.dim);
  blockIdx = b.index;
  blockDim = b.dim;
  gridDim = b.grid;
}

std::string describe_thread(const Block& b, int t) {
  const uint3 ti = unflatten(unsigned(t), b.dim);
  std::ostringstream s;
  s << "block (" << b.index.x << "," << b.index.y << "," << b.index.z << ") thread (" << ti.x << ","
    << ti.y << "," << ti.z << ")";
  return s.str();
}

std::string describe_place(const Thread& t) {
  std::ostringstream s;
  s << t.barrier << " at " << t.where.file_name() << ":" << t.where.line();
  return s.str();
}

// ---- switching between the scheduler and a fiber
// -------------------------------------------------

void enter_fiber(Fiber& f) {
  fiber_now = &f;
#ifdef QKV_EMULATOR_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, f.stack(), kStackBytes);
#endif
#ifdef QKV_EMULATOR_TSAN
  __tsan_switch_to_fiber(f.tsan_fiber, 0);
#endif
  switch_context(scheduler.context, f.context);
#ifdef QKV_EMULATOR_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  fiber_now = nullptr;
}

// From a fiber back to the scheduler; returns when the scheduler resumes this fiber.
void leave_fiber(Fiber& f) {
#ifdef QKV_EMULATOR_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, scheduler.stack, scheduler.stack_size);
#endif
#ifdef QKV_EMULATOR_TSAN
  __tsan_switch_to_fiber(scheduler.tsan_fiber, 0);
#endif
  switch_context(f.context, scheduler.context);
#ifdef QKV_EMULATOR_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, &scheduler.stack, &scheduler.stack_size);
#endif
}

// The fiber's body: CUDA threads, one after another, until none is left to start; then it parks
// as idle until the scheduler needs a fiber again, in this block or a later one. It never
// returns, and it never starts over: a restarted stack would leave the sanitizers' records of
// the frames it abandoned (ThreadSanitizer's shadow call stack overflowed after ~65000 blocks).
void fiber_main() {
#ifdef QKV_EMULATOR_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &scheduler.stack, &scheduler.stack_size);
#endif
  for (;;) {
    Block& b = *block_now;
    Fiber& f = *fiber_now;
    const int n = int(b.threads.size());
    while (b.started < n && b.error.empty()) {
      const int t = b.reverse ? n - 1 - b.started : b.started;
      ++b.started;
      Thread& thread = b.threads[t];
      thread.state = State::runnable;
      thread.fiber = &f;
      f.thread = t;
      set_builtins(b, t);
      try {
        b.body.call(b.body.closure);
      } catch (const KernelAbort&) {
      }
      thread.state = State::finished;
    }
    f.thread = -1;
    b.idle.push_back(&f);
    leave_fiber(f);
  }
}

// Gives the next thread not started yet to an idle fiber, or to a new one.
void start_fiber(Block& b) {
  if (!b.idle.empty()) {
    Fiber* f = b.idle.back();
    b.idle.pop_back();
    return enter_fiber(*f);
  }
  fiber_pool.push_back(std::make_unique<Fiber>());
  Fiber& f = *fiber_pool.back();
  prepare_context(f.context, f.stack(), kStackBytes, fiber_main);
  enter_fiber(f);
}

void resume(Block& b, int t) {
  Fiber& f = *b.threads[t].fiber;
  set_builtins(b, t);
  enter_fiber(f);
}

// Parks the running thread at a barrier until the scheduler releases it.
void wait_at(State state, const char* barrier, unsigned mask, std::source_location where) {
  Block& b = *block_now;
  Fiber& f = *fiber_now;
  Thread& t = b.threads[f.thread];
  t.state = state;
  t.barrier = barrier;
  t.where = where;
  t.mask = mask;
  leave_fiber(f);
  if (!b.error.empty()) throw KernelAbort{};
}

// ---- opening barriers
// ------------------------------------------------------------------------------

bool same_place(const Thread& a, const Thread& b) {
  return a.barrier == b.barrier && a.where.line() == b.where.line() &&
         std::string_view(a.where.file_name()) == b.where.file_name();
}

// Releases the collective that the lanes of warp `warp` wait at, once all lanes of its mask have
// arrived. Returns whether it opened; sets b.error on a misuse that can never resolve.
bool open_warp_barrier(Block& b, int warp) {
  const int n = int(b.threads.size()), first = 32 * warp;
  const int lanes = std::min(32, n - first);
  int leader = -1;
  for (int l = 0; l < lanes; ++l)
    if (b.threads[first + l].state == State::at_warp_barrier) {
      leader = first + l;
      break;
    }
  if (leader < 0) return false;
  const Thread& lead = b.threads[leader];
  bool ready = true;
  for (int l = 0; l < 32; ++l) {
    if (!(lead.mask >> l & 1u)) continue;
    if (l >= lanes) {
      b.error = describe_place(lead) + ": the mask names lane " + std::to_string(l) +
                ", which this block does not have (" + describe_thread(b, leader) + ")";
      return false;
    }
    const Thread& other = b.threads[first + l];
    if (other.state == State::finished) {
      b.error = describe_place(lead) + ": lane " + std::to_string(l) +
                " of the mask returned without reaching it (" + describe_thread(b, leader) + ")";
      return false;
    }
    if (other.state != State::at_warp_barrier) {
      ready = false;
      continue;
    }
    if (other.barrier != lead.barrier || other.mask != lead.mask) {
      b.error = "lanes of a warp wait at different collectives: " + describe_place(lead) + " (" +
                describe_thread(b, leader) + ") and " + describe_place(other) + " (" +
                describe_thread(b, first + l) + ")";
      return false;
    }
  }
  if (!ready) return false;
  for (int l = 0; l < lanes; ++l)
    if (lead.mask >> l & 1u) b.threads[first + l].state = State::runnable;
  if (warp == 0) ++b.collectives;
  return true;
}

// Releases __syncthreads once every thread of the block waits at it.
bool open_block_barrier(Block& b) {
  int waiting = -1;
  for (int t = 0; t < int(b.threads.size()); ++t) {
    const Thread& thread = b.threads[t];
    if (thread.state == State::at_block_barrier) {
      if (waiting >= 0 && !same_place(thread, b.threads[waiting])) {
        b.error =
            "threads of a block wait at different barriers: " + describe_place(b.threads[waiting]) +
            " (" + describe_thread(b, waiting) + ") and " + describe_place(thread) + " (" +
            describe_thread(b, t) + ")";
        return false;
      }
      waiting = t;
    } else if (thread.state != State::finished) {
      return false;  // still on its way, or held at a warp collective
    }
  }
  if (waiting < 0) return false;
  for (int t = 0; t < int(b.threads.size()); ++t)
    if (b.threads[t].state == State::finished) {
      b.error = describe_place(b.threads[waiting]) + ": " + describe_thread(b, t) +
                " returned without reaching it; every thread of a block must";
      return false;
    }
  for (Thread& thread : b.threads) thread.state = State::runnable;
  return true;
}

std::string describe_deadlock(const Block& b) {
  std::ostringstream s;
  s << "the block cannot go on (a barrier some threads never reach):";
  int shown = 0;
  for (int t = 0; t < int(b.threads.size()) && shown < 4; ++t) {
    const Thread& thread = b.threads[t];
    if (thread.state == State::at_block_barrier || thread.state == State::at_warp_barrier) {
      s << (shown ? "; " : " ") << describe_thread(b, t) << " waits at " << describe_place(thread);
      ++shown;
    }
  }
  return s.str();
}

// After a failure: every started thread that has not finished is parked in wait_at (at a
// barrier, or released from one and not yet resumed); it resumes only to unwind.
void unwind_parked_threads(Block& b) {
  for (int t = 0; t < int(b.threads.size()); ++t) {
    const State state = b.threads[t].state;
    if (state != State::not_started && state != State::finished) resume(b, t);
  }
}

// Runs the lanes of `warp` until none can go on (all wait at __syncthreads, or returned), or
// until `max_openings` of its warp collectives have opened (-1: no limit). Returns whether any
// lane ran; on a failure b.error is set.
bool run_warp(Block& b, int warp, int max_openings) {
  const int n = int(b.threads.size()), first = 32 * warp, last = std::min(n, first + 32);
  bool any = false;
  for (int openings = 0; max_openings < 0 || openings < max_openings; ++openings) {
    bool ran = false;
    for (int l = 0; l < last - first; ++l) {
      const int t = b.reverse ? last - 1 - l : first + l;
      if (b.threads[t].state == State::not_started) {
        start_fiber(b);
        ran = true;
      } else if (b.threads[t].state == State::runnable) {
        resume(b, t);
        ran = true;
      }
      if (!b.error.empty()) return true;
    }
    any |= ran;
    if (!open_warp_barrier(b, warp)) break;
    any = true;
  }
  return any;
}

void run_block(Block& b) {
  const int n = int(b.threads.size()), warps = (n + 31) / 32;
  for (Thread& t : b.threads) t = Thread{};
  b.started = 0;
  b.stretch = b.collectives = 0;
  if (b.shared) std::memset(b.shared, 0xff, b.shared_bytes);
  auto end_stretch = [&] {  // remember warp 0's collectives in this stretch for the next block
    if (b.stretch_collectives.size() <= size_t(b.stretch))
      b.stretch_collectives.resize(b.stretch + 1);
    b.stretch_collectives[b.stretch++] = b.collectives;
    b.collectives = 0;
  };
  for (;;) {
    // Each warp runs ahead as far as it can before the next one starts (warps kept in step
    // would hide a race between them); a lagging warp first goes part of the way and then waits
    // for all the others.
    bool progressed = false;
    if (b.lagging_warp >= 0 && size_t(b.stretch) < b.stretch_collectives.size())
      progressed |= run_warp(b, b.lagging_warp, b.stretch_collectives[b.stretch] * b.lag / 6);
    for (int w = 0; w < warps && b.error.empty(); ++w) {
      const int warp = b.reverse ? warps - 1 - w : w;
      if (warp != b.lagging_warp) progressed |= run_warp(b, warp, -1);
    }
    if (b.lagging_warp >= 0 && b.error.empty()) progressed |= run_warp(b, b.lagging_warp, -1);
    if (!b.error.empty()) return unwind_parked_threads(b);
    if (open_block_barrier(b)) {
      progressed = true;
      end_stretch();
    }
    if (!b.error.empty()) return unwind_parked_threads(b);
    if (std::all_of(b.threads.begin(), b.threads.end(),
                    [](const Thread& t) { return t.state == State::finished; }))
      return end_stretch();
    if (!progressed) {
      b.error = describe_deadlock(b);
      return unwind_parked_threads(b);
    }
  }
}

// A block's interleaving: block 0 runs its threads in increasing order, block 1 in decreasing
// order, and every later block k in increasing order with warp (k - 2) mod warps lagging: it
// stops a half, a third or two thirds of the way through each stretch (in turn, so that over a
// dozen blocks each warp stops at each point) until the others have gone as far as they can.
void choose_schedule(Block& b, uint64_t linear) {
  const uint64_t warps = (b.threads.size() + 31) / 32;
  b.reverse = linear == 1;
  b.lagging_warp = linear >= 2 && warps > 1 ? int((linear - 2) % warps) : -1;
  constexpr int kLags[] = {3, 2, 4};  // in sixths
  b.lag = linear < 2 ? 3 : kLags[(linear - 2) % 3];
}

std::string check_configuration(dim3 grid, dim3 block, size_t shared_bytes) {
  std::ostringstream s;
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0)
    s << "a grid or block dimension is zero";
  else if (threads > kMaxThreadsPerBlock || block.z > kMaxBlockZ)
    s << threads << " threads per block (" << block.x << "x" << block.y << "x" << block.z
      << "), at most " << kMaxThreadsPerBlock;
  else if (grid.y > kMaxGridYZ || grid.z > kMaxGridYZ || grid.x > 0x7fffffffu)
    s << "grid " << grid.x << "x" << grid.y << "x" << grid.z << " is too large";
  else if (shared_bytes > kMaxSharedBytes)
    s << shared_bytes << " bytes of dynamic shared memory, at most " << kMaxSharedBytes;
  return s.str();
}

}  // namespace

void run_grid(dim3 grid, dim3 block, size_t shared_bytes, KernelBody body) {
  if (const std::string bad = check_configuration(grid, block, shared_bytes); !bad.empty()) {
    set_pending_error(cudaErrorInvalidConfiguration, "kernel launch: " + bad);
    return;
  }
  if (block_now) {
    set_pending_error(cudaErrorLaunchFailure, "a kernel launched from inside a kernel");
    return;
  }
  Block b;
  b.grid = grid;
  b.dim = block;
  b.body = body;
  b.threads.resize(size_t(block.x) * block.y * block.z);
  b.exchange.resize(b.threads.size());
  for (auto& f : fiber_pool) b.idle.push_back(f.get());
  // Exactly the bytes asked for, so that AddressSanitizer sees an access past them, aligned as
  // the kernels' WMMA tiles need.
  constexpr std::align_val_t kSharedAlignment{128};
  auto free_shared = [&](unsigned char* p) { ::operator delete[](p, kSharedAlignment); };
  std::unique_ptr<unsigned char, decltype(free_shared)> shared(
      shared_bytes ? static_cast<unsigned char*>(::operator new[](shared_bytes, kSharedAlignment))
                   : nullptr,
      free_shared);
  b.shared = shared.get();
  b.shared_bytes = shared_bytes;
#ifdef QKV_EMULATOR_TSAN
  scheduler.tsan_fiber = __tsan_get_current_fiber();
#endif
  block_now = &b;
  uint64_t linear = 0;
  for (unsigned z = 0; z < grid.z && b.error.empty(); ++z)
    for (unsigned y = 0; y < grid.y && b.error.empty(); ++y)
      for (unsigned x = 0; x < grid.x && b.error.empty(); ++x, ++linear) {
        b.index = {x, y, z};
        choose_schedule(b, linear);
        run_block(b);
      }
  block_now = nullptr;
  if (!b.error.empty()) set_pending_error(cudaErrorLaunchFailure, b.error);
}

void* dynamic_shared_memory() { return block_now->shared; }

void fail(const std::string& what, std::source_location where) {
  Block& b = *block_now;
  if (b.error.empty())
    b.error = what + " at " + where.file_name() + ":" + std::to_string(where.line()) + " (" +
              describe_thread(b, fiber_now->thread) + ")";
  throw KernelAbort{};  // to fiber_main; the scheduler then stops the launch
}

void sync_threads(std::source_location where) {
  wait_at(State::at_block_barrier, "__syncthreads", 0, where);
}

void sync_warp(unsigned mask, std::source_location where) {
  warp_collective(mask, "__syncwarp", where);
}

void warp_collective(unsigned mask, const char* what, std::source_location where) {
  const int lane = lane_id();
  if (!(mask >> lane & 1u))
    fail(std::string(what) + ": the calling lane is not in the mask", where);
  wait_at(State::at_warp_barrier, what, mask, where);
}

int lane_id() { return fiber_now->thread % 32; }
LaneExchange& my_exchange() { return block_now->exchange[size_t(fiber_now->thread)]; }
const LaneExchange* warp_exchange() {
  return block_now->exchange.data() + size_t(fiber_now->thread / 32 * 32);
}

}  // namespace qkv::cuda_emulator
