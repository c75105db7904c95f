// What the two flash-attention implementations share (cuda/flash_attention.cu on CUDA cores in
// float32, cuda/flash_attention_tc.cu on tensor cores in bf16): the checked shapes, the mask
// pointer, the backward's per-row deltas and the launch with a large shared-memory tile. For the
// .cu files only; not part of the public API.
#pragma once

#include <cstdint>

#include "cuda/launch.cuh"
#include "engine/tensor.h"

namespace qkv::cuda::flash {

// The kernels' view of a problem: q [B*H, tq, d], k and v [B*H, tk, d].
struct AttentionShape {
  int64_t heads, tq, tk, d;
  float scale;
  bool causal;
};

// Checks q, k, v and the key-padding mask against the contract of cuda/flash_attention.h
// (throwing qkv::Error that names the operand) and returns the shape.
AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& mask, bool causal, double scale);
// t is defined, on the CUDA device, float32, contiguous and of this shape.
void check_attention_tensor(const Tensor& t, const char* what, const Shape& shape);
const uint8_t* mask_data(const Tensor& mask);  // null when the mask is undefined

// delta_i = dO_i . O_i for every row of grad_out and out ([..., d], contiguous float32): the
// backward's sum_j p_ij dp_ij, as one float per row. round_grad_out_to_bf16: dO rounded as the
// tensor-core kernels multiply it, so that sum_j dS_ij = 0 holds for the values they use.
Tensor row_deltas(const Tensor& grad_out, const Tensor& out, bool round_grad_out_to_bf16);

// Launches `kernel` on the backend's stream with `threads` per block and `bytes` of dynamic
// shared memory, first lifting the 48 KiB default where a kernel needs more (Ampere and Hopper
// allow far more per block on request).
template <typename Kernel, typename... Args>
void launch_with_shared_memory(Kernel kernel, dim3 grid, int threads, size_t bytes, Args... args) {
  if (bytes > 48 * 1024)
    QKV_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  QKV_LAUNCH(kernel, grid, threads, bytes, stream())(args...);
  QKV_CUDA_CHECK_LAUNCH();
}

}  // namespace qkv::cuda::flash
