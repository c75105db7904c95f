// Memory-efficient attention on the CPU (Rabe & Staats 2021; the FlashAttention recurrence).
//
// softmax(q k^T * scale) v is computed one tile of queries x keys at a time. Each query row keeps
// a running maximum m, a running normalizer l and an unnormalized output; a new tile of scores
// rescales them by exp(m_old - m_new) (the online softmax), so the T x S score matrix never
// exists - memory is O(T d). The backward does not keep the probabilities either: it saves each
// row's log-sum-exp and recomputes the scores tile by tile, forming dV, dP, dS = P (dP - D),
// dQ and dK from them (D_t = dO_t . O_t).
//
// Masks are bool (true = blocked), each broadcastable to [..., T, S] and read in place through
// its strides (an expanded key-padding mask costs nothing); structured patterns
// (nn/attention_pattern.h) are evaluated from positions, and tiles they leave empty are skipped.
// A row with every key blocked yields zeros, as the naive attention does.
//
// Dropout on the attention weights (CPU): the mask is drawn per tile row where it is used, from
// the counters a whole [..., T, S] Bernoulli fill would take (engine/cpu/bernoulli_range.h), and
// drawn again in the backward pass instead of stored. So with the same generator state the kernel
// drops exactly the weights scaled_dot_product_attention's dropout drops, and leaves the
// generator where that would.
#pragma once

#include <vector>

#include "engine/random.h"
#include "nn/attention_pattern.h"

namespace qkv::nn {

// q [..., T, d], k [..., S, d], v [..., S, dv] with equal leading dims -> [..., T, dv].
// Differentiable (first order) in q, k, v; records "efficient_attention". dropout_p in [0, 1):
// the probability of dropping each attention weight (kept ones scaled by 1 / (1 - dropout_p)),
// drawn from `gen` (default: the process-wide generator); CPU only.
// Tensors on another device go to that backend's fused kernel (nn/fused_attention.h), which
// takes fewer forms of masks and no dropout: ask efficient_attention_supported first.
Tensor efficient_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const std::vector<Tensor>& masks = {},
                           const AttentionPattern& pattern = {}, double scale = -1,
                           double dropout_p = 0, Generator* gen = nullptr);

// Whether efficient_attention handles these operands: on the CPU, float32/float64 with equal
// leading dims, bool masks (any pattern) and dropout_p in [0, 1); on another device, what
// fused_attention_supported says for them and the pattern, without dropout. The callers fall back
// to the naive attention otherwise.
bool efficient_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const std::vector<Tensor>& masks,
                                   const AttentionPattern& pattern = {}, double dropout_p = 0);

}  // namespace qkv::nn
