// One attention computation as a backend's fused kernel receives it (Backend::attention_forward):
// softmax(scale * q k^T, hidden keys at -inf, dropout on the weights) v, without the T x S
// scores ever being stored.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/attention_pattern.h"
#include "engine/tensor.h"

namespace qkv {

// Dropout on the attention weights: weight (n, t, s) of the N problems is kept (and scaled by
// 1 / (1 - p)) as element (n T + t) S + s of a Bernoulli fill of N x T x S elements drawn from
// counter `offset` of `seed` (engine/random.h), exactly as dropout() on the [..., T, S] weights
// would draw it. p = 0: no dropout.
//
// By example (engine/example_draws.h) when `examples` is defined: the weights [lead..., T, S] are
// drawn as dropout() draws them by example, under `key` (philox::call_key of one generator
// counter), row b of the first leading dim from example examples[b] (int64, one per row).
struct AttentionDropout {
  double p = 0;
  uint64_t seed = 0, offset = 0;
  uint64_t key = 0;
  Tensor examples;
};

struct AttentionProblem {
  // q [lead..., T, d], k [lead..., S, d], v [lead..., S, dv] with equal leading dims, one dtype
  // and one device, detached; any strides (a backend copies what it cannot read in place).
  Tensor q, k, v;
  // Bool masks (true = key hidden from the query), each broadcastable to [lead..., T, S].
  std::vector<Tensor> masks;
  AttentionPattern pattern;
  double scale = 1;  // > 0
  AttentionDropout dropout;
  // Whether attention_backward will follow (a graph is recorded): a backend may then keep what its
  // backward would otherwise recompute (the CPU's small-problem path keeps the weights).
  bool backward_expected = false;

  int64_t batch() const;  // prod(lead), the number of independent (T x S) problems
};

// What attention_forward hands back: the output [lead..., T, dv] (laid out as the backend
// chooses) and whatever its backward needs besides the problem (each row's log-sum-exp, the
// copies it made), kept by the caller until the backward runs.
struct AttentionForward {
  Tensor out;
  Tensor lse;
  std::vector<Tensor> saved;
};

struct AttentionGradients {
  Tensor q, k, v;  // shaped like the problem's q, k, v
};

}  // namespace qkv
