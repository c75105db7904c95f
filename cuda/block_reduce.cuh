// Reducing one value per thread to one value per block (every thread gets the result).
//
// Used by the row kernels (softmax, layer_norm, reductions along a contiguous row). The combine is
// a functor so sums, maxima and (value, index) pairs share the code; it goes through shared
// memory rather than warp shuffles so any trivially copyable State works.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qkv::cuda {

constexpr int kMaxBlockReduceThreads = 1024;

// All threads of the block must call this. `scratch` holds blockDim.x States.
template <typename State, typename Combine>
__device__ State block_reduce(State value, Combine combine, State* scratch) {
  const int t = threadIdx.x;
  scratch[t] = value;
  __syncthreads();
  // blockDim.x is a power of two (the launchers guarantee it)
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) scratch[t] = combine(scratch[t], scratch[t + half]);
    __syncthreads();
  }
  State result = scratch[0];
  __syncthreads();  // scratch may be reused right after
  return result;
}

template <typename T>
struct SumOp {
  __device__ T operator()(T a, T b) const { return a + b; }
};
template <typename T>
struct MaxOp {
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

// Threads for a block that reduces rows of `cols` elements: a power of two between 32 and 512.
inline int row_threads(int64_t cols) {
  int t = 32;
  while (t < 512 && t * 4 < cols) t *= 2;
  return t;
}

}  // namespace qkv::cuda
