// How attention is computed, decided in one place.
//
// Three kernels compute the same softmax(q k^T * scale + masks) v:
// - single_query: one query row per (batch, head) with at most a key-padding mask and no graph,
//   a decoding step (nn/decode_attention.h);
// - fused: the backend's memory-efficient kernel, when no weights are wanted, every mask is bool
//   and the backend takes the problem (nn/efficient_attention.h);
// - composed: the naive attention from engine ops, which materializes the weights - the
//   reference the other two are tested against, and the route for everything else.
#pragma once

#include <utility>
#include <vector>

#include "nn/attention_pattern.h"

namespace qkv::nn {

struct AttentionRequest {
  AttentionRequest(Tensor q, Tensor k, Tensor v, std::vector<Tensor> masks = {})
      : q(std::move(q)), k(std::move(k)), v(std::move(v)), masks(std::move(masks)) {}

  Tensor q, k, v;  // [..., T, d], [..., S, d], [..., S, dv]
  // Each broadcastable to [..., T, S]: bool (true = blocked) or floating (added to the scores).
  std::vector<Tensor> masks;
  AttentionPattern pattern;  // causal and structured patterns, evaluated by position
  double scale = -1;         // <= 0: 1 / sqrt(d)
  double dropout_p = 0;      // on the weights
  bool need_weights = false;
  bool allow_memory_efficient = true;  // false: always the composed kernel
};

enum class AttentionKernel { single_query, fused, composed };

AttentionKernel choose_attention_kernel(const AttentionRequest& request);

struct AttentionOutput {
  Tensor output;
  Tensor weights;  // [..., T, S]; undefined unless the composed kernel ran
};

// bool [T, S], true above the diagonal: position t may attend to keys 0..t only.
Tensor causal_mask(int64_t T, int64_t S = -1, Device device = Device::cpu());

// Runs the kernel choose_attention_kernel picks.
AttentionOutput compute_attention(const AttentionRequest& request);

}  // namespace qkv::nn
