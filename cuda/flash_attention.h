// Fused scaled-dot-product attention for CUDA tensors, flash-attention style.
//
//   out = softmax(scale * q k^T + mask) v
//
// computed in tiles over queries and keys with an online softmax, so the T x T score matrix is
// never stored: memory is O(T d), and the backward recomputes scores from q, k and the saved
// per-row log-sum-exp instead of reading them back.
//
// Layout: q is [B, H, Tq, d], k and v are [B, H, Tk, d], all contiguous float32 on the CUDA
// device, d <= 128. Masks follow PyTorch: `key_padding_mask` is an optional bool [B, Tk] tensor
// where true means "ignore this key"; `causal` hides key j from query i when j > i (top-left
// aligned, as torch's is_causal). A query that sees no key at all gets zeros (and zero gradients),
// matching qkv's softmax of a fully -inf row. `scale` is usually 1/sqrt(d).
//
// As with Backend kernels, the caller allocates the outputs (contiguous, float32, on the device).
// These are kernels, not autograd ops: the nn attention layer records the backward.
#pragma once

#include "engine/tensor.h"

namespace qkv::cuda {

// out: [B, H, Tq, d]; lse: [B, H, Tq], the log-sum-exp of each query's scaled scores (-inf for a
// query with no visible key), kept for the backward.
void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& key_padding_mask, bool causal, double scale,
                             const Tensor& out, const Tensor& lse);

// Gradients of the forward above with respect to q, k and v, given grad_out = dL/d(out) and the
// forward's out and lse. grad_q/grad_k/grad_v have q/k/v's shapes and are overwritten.
void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& key_padding_mask, bool causal, double scale,
                              const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                              const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v);

// The same two computations on tensor cores (cuda/flash_attention_tc.cu, sm_80 or newer), with
// the same contract and float32 inputs and outputs: q, k, v and grad_out are rounded to bfloat16
// as their tiles are loaded, the products accumulate in float32 (WMMA), softmax runs in float32,
// and the probabilities (and the backward's dS) are rounded to bfloat16 before their products,
// as FlashAttention does. The backend runs these under Autocast(bf16) (engine/autocast.h).
void flash_attention_forward_bf16(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& key_padding_mask, bool causal, double scale,
                                  const Tensor& out, const Tensor& lse);
void flash_attention_backward_bf16(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& key_padding_mask, bool causal, double scale,
                                   const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                                   const Tensor& grad_q, const Tensor& grad_k,
                                   const Tensor& grad_v);

}  // namespace qkv::cuda
