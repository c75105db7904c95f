// A CPU emulator of the CUDA execution model, for running qkv's own kernels without a GPU.
//
// The files of cuda/ compile with the C++ compiler against the headers of
// tests/cuda_emulator/include (cuda_runtime.h, cuda_bf16.h, mma.h, cublas_v2.h), which declare the
// parts of CUDA that qkv uses and implement them here and in runtime.cpp and cublas.cpp. The GPU
// suite (tests/cuda) then runs on every machine as `cuda_emulated`: the same tests, the same
// kernel source, the CPU playing the device. See docs/CUDA.md, "The CPU emulator".
//
// What it models:
// - a launch runs every block of the grid, one block at a time; each CUDA thread of a block is a
//   fiber (ucontext) that runs until it reaches a barrier (__syncthreads, __syncwarp, a shuffle,
//   a WMMA mma_sync), or returns. A barrier opens when every thread it waits for has reached it.
// - barrier misuse is an error, not a hang: a __syncthreads that some threads of the block never
//   reach (they returned, or wait at another barrier), a warp collective whose mask names a lane
//   that returned or does not exist. The kernel stops and the launch reports
//   cudaErrorLaunchFailure with the reason, the file and line, the block and the thread.
// - between barriers one thread runs alone, so a missing barrier shows as a wrong result: the
//   threads of even blocks run in increasing order, those of odd blocks in decreasing order, so
//   both "read before the writer ran" and "overwritten before the reader ran" are caught.
// - shared memory is per block; dynamic shared memory starts filled with 0xff bytes (NaN as
//   float), so reading what nobody wrote shows.
// - WMMA fragments hold 8 elements per lane, as on the hardware, in a mapping of our own (CUDA
//   leaves it unspecified); mma_sync multiplies in float32 as tensor cores do for bf16.
//
// What it does not model: timing, occupancy, registers, memory coalescing, the memory model
// (every access is sequentially consistent here), or the device's last-bit float rounding (host
// libm expf, no fused multiply-add unless the compiler picks one). Kernels run synchronously, so
// stream order holds trivially.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <string>
#include <type_traits>

// ---- the language extensions: empty or host equivalents
// ------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
// A __shared__ variable is one per block. Blocks of a launch run one after another on one host
// thread, so a function-local static (one per host thread) is exactly that.
#define __shared__ static thread_local

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;

// The built-in variables of the thread that is running (set by the scheduler at every switch).
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace qkv::cuda_emulator {

// ---- launching
// -------------------------------------------------------------------------------------

// A non-owning reference to the kernel body of one launch (called once per CUDA thread).
struct KernelBody {
  void (*call)(const void* closure);
  const void* closure;
};

// Runs the grid. A configuration error (too many threads, too much shared memory) or a failure
// inside the kernel sets the error that the next cudaGetLastError() returns.
void run_grid(dim3 grid, dim3 block, size_t shared_bytes, KernelBody body);

// QKV_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...) in cuda/launch.cuh: `call` is a
// generic lambda that calls the kernel (so a kernel template deduces its arguments, as with
// <<< >>>), and the arguments are copied once, as the runtime copies them to the device.
template <typename Call>
struct Launcher {
  dim3 grid, block;
  size_t shared_bytes;
  Call call;
  template <typename... Args>
  void operator()(Args... args) const {
    auto body = [&] { call(args...); };
    run_grid(grid, block, shared_bytes,
             {[](const void* c) { (*static_cast<const decltype(body)*>(c))(); }, &body});
  }
};
template <typename Call>
Launcher<Call> launcher(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t, Call call) {
  return {grid, block, shared_bytes, call};
}

void* dynamic_shared_memory();  // this block's

// ---- inside a kernel ---------------------------------------------------------------------------

// Stops the kernel with an error naming `where`, the block and the thread. Never returns.
[[noreturn]] void fail(const std::string& what, std::source_location where);

void sync_threads(std::source_location where);
void sync_warp(unsigned mask, std::source_location where);

// What a lane shares with the rest of its warp during a collective: a shuffle's value, or the
// addresses of an mma_sync's operand fragments.
struct LaneExchange {
  unsigned char value[16];
  const void* a;
  const void* b;
};
// This lane's slot, and the warp's 32 (valid between the collective's two barriers).
LaneExchange& my_exchange();
const LaneExchange* warp_exchange();
int lane_id();

// All lanes of `mask` reach this point together: the barrier of a shuffle or an mma_sync.
void warp_collective(unsigned mask, const char* what, std::source_location where);

template <typename T>
T shuffle(unsigned mask, T value, int source_lane, int width, const char* what,
          std::source_location where) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16, "shuffle: value too large");
  if (width <= 0 || width > 32 || (width & (width - 1)))
    fail(std::string(what) + ": width must be a power of two up to 32", where);
  std::memcpy(my_exchange().value, &value, sizeof(T));
  warp_collective(mask, what, where);
  const int lane = lane_id(), segment = lane / width * width;
  const int src = source_lane < 0 || source_lane >= width ? lane : segment + source_lane;
  if (!(mask >> src & 1u)) fail(std::string(what) + ": reads a lane outside the mask", where);
  T result;
  std::memcpy(&result, warp_exchange()[src].value, sizeof(T));
  warp_collective(mask, what, where);  // nobody overwrites a slot before every lane has read it
  return result;
}

}  // namespace qkv::cuda_emulator

// ---- the device built-ins qkv uses --------------------------------------------------------------

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  qkv::cuda_emulator::sync_threads(where);
}
inline void __syncwarp(unsigned mask = 0xffffffffu,
                       std::source_location where = std::source_location::current()) {
  qkv::cuda_emulator::sync_warp(mask, where);
}
template <typename T>
T __shfl_sync(unsigned mask, T value, int lane, int width = 32,
              std::source_location where = std::source_location::current()) {
  return qkv::cuda_emulator::shuffle(mask, value, lane, width, "__shfl_sync", where);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32,
                  std::source_location where = std::source_location::current()) {
  const int lane = qkv::cuda_emulator::lane_id() % width;
  return qkv::cuda_emulator::shuffle(mask, value, lane ^ lane_mask, width, "__shfl_xor_sync",
                                     where);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32,
                   std::source_location where = std::source_location::current()) {
  const int lane = qkv::cuda_emulator::lane_id() % width;
  const int src = lane + int(delta) < width ? lane + int(delta) : lane;  // past the end: own value
  return qkv::cuda_emulator::shuffle(mask, value, src, width, "__shfl_down_sync", where);
}

// Blocks run one thread at a time, so an atomic read-modify-write is a plain one.
template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}

// CUDA's min and max overloads for device code.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
// The float versions are fminf / fmaxf, as in CUDA: a NaN operand gives the other one.
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
using std::isfinite;
using std::isinf;
using std::isnan;
