// Memory-efficient attention: softmax(q k^T * scale) v without the T x S scores ever being
// stored, on the backend's fused kernel (Backend::attention_forward/backward,
// engine/attention_problem.h). The CPU's kernel (engine/cpu/attention_kernels.cpp) takes every
// float32/float64 problem: any bool masks read in place, any pattern (empty tiles skipped),
// dropout; a device kernel such as CUDA's takes one key-padding mask and the causal flag, without
// dropout (engine/fused_attention_plan.h). Ask efficient_attention_supported first.
//
// Masks are bool (true = blocked), each broadcastable to [..., T, S]; structured patterns are
// nn/attention_pattern.h's. A row with every key blocked yields zeros, as the naive attention does.
//
// Dropout on the attention weights: the kernel draws the mask from the counters a whole
// [..., T, S] Bernoulli fill would take (engine/attention_problem.h), so with the same generator
// state it drops exactly the weights scaled_dot_product_attention's dropout drops, and leaves the
// generator where that would. While the generator draws by example (engine/example_draws.h, as the
// trainer's steps do), the same holds for dropout's draws by example: the CPU's kernel takes them
// when the weights' first leading dim is the batch, other backends refuse them.
#pragma once

#include <array>
#include <vector>

#include "engine/random.h"
#include "nn/attention_pattern.h"

namespace qkv::nn {

// q [..., T, d], k [..., S, d], v [..., S, dv] with equal leading dims -> [..., T, dv].
// Differentiable (first order) in q, k, v; records "efficient_attention". dropout_p in [0, 1):
// the probability of dropping each attention weight (kept ones scaled by 1 / (1 - dropout_p)),
// drawn from `gen` (default: the process-wide generator).
Tensor efficient_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const std::vector<Tensor>& masks = {},
                           const AttentionPattern& pattern = {}, double scale = -1,
                           double dropout_p = 0, Generator* gen = nullptr);

// Self-attention's q, k and v in one tensor, as one projection of x makes them: qkv [B, T, 3E]
// (E = H * d; q, then k, then v) -> [B, H, T, d], efficient_attention of the three [B, H, T, d]
// views packed_heads makes of it. Records "efficient_attention_packed", whose backward
// writes the three gradients into one [B, T, 3E] tensor: the projection's backward then takes it
// whole, with no copy and no sum of three input gradients.
Tensor efficient_attention_packed(const Tensor& qkv, int64_t heads,
                                  const std::vector<Tensor>& masks = {},
                                  const AttentionPattern& pattern = {}, double scale = -1,
                                  double dropout_p = 0, Generator* gen = nullptr);
// qkv [B, T, 3 H d] -> its q, k and v as views [B, H, T, d] (differentiable views, no copy).
std::array<Tensor, 3> packed_heads(const Tensor& qkv, int64_t heads);

// Whether efficient_attention handles these operands: one dtype and device for q, k and v, equal
// leading dims, matching feature and key dims, dropout_p in [0, 1), and a backend whose fused
// kernel takes the problem (Backend::supports_attention), its dropout drawn by example when the
// process-wide generator draws so. The callers fall back to the naive
// attention otherwise.
bool efficient_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const std::vector<Tensor>& masks,
                                   const AttentionPattern& pattern = {}, double dropout_p = 0);

}  // namespace qkv::nn
