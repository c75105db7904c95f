// Small pieces every kernel file uses: the launch, launch sizes, dtype dispatch, bf16 conversions.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/cuda_backend_impl.h"
#include "engine/convert.h"   // convert<To>(v): copy/cast, any device
#include "engine/dispatch.h"  // QKV_DISPATCH_FLOAT / QKV_DISPATCH_ALL: dtype -> T, any device
#include "engine/dtype.h"
#include "engine/scalar_math.h"

#ifdef QKV_CUDA_EMULATION
#include "tests/cuda_emulator/emulator.h"
#endif

// Every kernel launch is written QKV_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...).
// Compiled by nvcc it is exactly kernel<<<grid, block, shared_bytes, stream>>>(args...). Compiled
// by the C++ compiler for the CPU emulator of tests/cuda_emulator, it runs every thread of every
// block on the CPU, so the GPU suite checks the kernels on machines without a GPU (docs/CUDA.md).
// The two spellings differ in syntax only, hence a macro: <<< >>> is not C++.
#ifdef QKV_CUDA_EMULATION
#define QKV_LAUNCH(kernel, grid, block, shared_bytes, stream)       \
  ::qkv::cuda_emulator::launcher(grid, block, shared_bytes, stream, \
                                 [=](auto... args) { kernel(args...); })
#else
#define QKV_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  kernel<<<grid, block, shared_bytes, stream>>>
#endif

namespace qkv::cuda {

// The block's dynamic shared memory (the launch's shared_bytes), 128-byte aligned, seen as T.
template <typename T>
__device__ inline T* dynamic_shared_memory() {
#ifdef QKV_CUDA_EMULATION
  return static_cast<T*>(::qkv::cuda_emulator::dynamic_shared_memory());
#else
  extern __shared__ __align__(128) unsigned char bytes[];
  return reinterpret_cast<T*>(bytes);
#endif
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements. The cap keeps the grid small enough to stay
// resident; each thread then walks several elements.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(std::clamp<int64_t>(blocks, 1, int64_t(1) << 16));
}

// The first element a thread handles and the stride between its elements.
__device__ inline int64_t grid_start() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_step() { return int64_t(gridDim.x) * blockDim.x; }

inline cudaStream_t stream() { return cuda_backend().stream(); }

}  // namespace qkv::cuda
