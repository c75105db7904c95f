// Attention on a device's fused kernel (Backend::fused_attention_forward/backward, e.g. the CUDA
// flash kernels), reached through nn::efficient_attention when q, k and v are not on the CPU.
//
// The CPU kernel (nn/efficient_attention.h) reads any number of bool masks in place and any
// structured pattern; a fused device kernel takes less: one key-padding mask [B, S] and a causal
// flag. plan_fused_masks translates the general form - bool masks broadcastable to
// [lead..., T, S] plus an AttentionPattern - into that one, or says it cannot:
//
// - a mask whose query dim is 1 (it hides the same keys from every query, like MultiheadAttention's
//   key_padding_mask reshaped to [B, 1, 1, S]) is key padding. The kernel's [B, H] are the leading
//   dims split after the last one any mask varies over, so a mask that varies over heads as well
//   still fits (B = batch * heads, H = 1); several such masks are or-ed into one;
// - pattern.causal is the kernel's causal flag (top-left aligned, as the pattern's);
// - a mask that varies over queries (an arbitrary [T, S] mask, even one that happens to be causal:
//   telling would mean reading it back from the device), a window or a block-sparse layout cannot
//   be said this way: no plan, and the callers compose attention from engine ops instead.
#pragma once

#include <optional>
#include <vector>

#include "nn/attention_pattern.h"

namespace qkv::nn {

struct FusedMaskPlan {
  int64_t batch = 1;   // the kernel's B: the leading dims up to the last one a mask varies over
  int64_t heads = 1;   // the kernel's H: the remaining leading dims
  Tensor key_padding;  // contiguous bool [batch, S] (true = hidden), undefined when no mask
  bool causal = false;
};

// `lead` holds the leading dims of the scores [lead..., T, S]. Masks must be bool; undefined
// entries are skipped. Returns nothing when the masks and pattern are not expressible.
std::optional<FusedMaskPlan> plan_fused_masks(const std::vector<Tensor>& masks,
                                              const AttentionPattern& pattern, const Shape& lead,
                                              int64_t T, int64_t S);

// Whether fused_attention handles these operands: q, k, v (and the masks) on one non-CPU device
// whose backend has a fused kernel for their dtype and head width, equal leading dims, equal head
// widths for q, k and v, and masks plan_fused_masks can express.
bool fused_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                               const std::vector<Tensor>& masks, const AttentionPattern& pattern);

// q [..., T, d], k [..., S, d], v [..., S, d] -> [..., T, d] on the backend's fused kernel;
// scale <= 0 means 1/sqrt(d). Differentiable (first order) in q, k, v; records
// "efficient_attention", the same op as the CPU kernel (the gradcheck case of that name checks
// the formula; tests/cuda checks each device against the CPU).
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                       const std::vector<Tensor>& masks, const AttentionPattern& pattern,
                       double scale);

}  // namespace qkv::nn
