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

// Whether efficient_attention handles these operands: one dtype and device for q, k and v, equal
// leading dims, matching feature and key dims, dropout_p in [0, 1), and a backend whose fused
// kernel takes the problem (Backend::supports_attention), its dropout drawn by example when the
// process-wide generator draws so. The callers fall back to the naive
// attention otherwise.
bool efficient_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const std::vector<Tensor>& masks,
                                   const AttentionPattern& pattern = {}, double dropout_p = 0);

}  // namespace qkv::nn
