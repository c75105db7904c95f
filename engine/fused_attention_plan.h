// Attention problems (engine/attention_problem.h) on a device kernel that takes less than the
// general form: one key-padding mask [B, S] and a causal flag on contiguous [B, H, T, d] operands
// (Backend::fused_attention_forward/backward, e.g. the CUDA flash kernels). Backend's default
// attention_forward/backward are built on these.
//
// plan_fused_masks translates the general form - bool masks broadcastable to [lead..., T, S] plus
// an AttentionPattern - into that one, or says it cannot:
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

#include "engine/attention_problem.h"

namespace qkv {

class Backend;

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

// Whether `backend`'s device kernel takes the problem: no dropout, equal head widths for q, k and
// v, masks on the problem's device that plan_fused_masks can express, and a kernel for the dtype
// and head width (supports_fused_attention).
bool fits_fused_kernel(const Backend& backend, const AttentionProblem& problem);

// The problem on the device kernel: operands copied contiguous as [B, H, T, d]; forward.out is
// shaped like q, and forward.saved holds the copies and the key padding for the backward.
AttentionForward fused_kernel_forward(Backend& backend, const AttentionProblem& problem);
AttentionGradients fused_kernel_backward(Backend& backend, const AttentionProblem& problem,
                                         const AttentionForward& forward, const Tensor& grad_out);

}  // namespace qkv
