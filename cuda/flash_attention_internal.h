// What the two flash-attention implementations share (cuda/flash_attention.cu on CUDA cores in
// float32, cuda/flash_attention_tc.cu on tensor cores in bf16): the checked shapes, the mask
// pointer and the backward's per-row deltas. Host code only; not part of the public API.
#pragma once

#include <cstdint>

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
// backward's sum_j p_ij dp_ij, as one float per row.
Tensor row_deltas(const Tensor& grad_out, const Tensor& out);

}  // namespace qkv::cuda::flash
