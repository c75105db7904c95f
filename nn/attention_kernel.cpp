#include "nn/attention_kernel.h"

#include <cmath>
#include <limits>

#include "engine/error.h"
#include "engine/random.h"
#include "nn/decode_attention.h"
#include "nn/efficient_attention.h"

namespace qkv::nn {

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// The one mask a single-query step takes: bool [B, 1, 1, S] (MultiheadAttention's key padding)
// as [B, S]; undefined when there is none. Sets `fits` false for any other mask.
Tensor key_padding_of(const std::vector<Tensor>& masks, const Tensor& q, int64_t S, bool& fits) {
  fits = masks.size() <= 1;
  if (masks.empty() || !fits) return Tensor();
  const Tensor& m = masks[0];
  fits = m.dtype() == DType::b8 && m.dim() == 4 && m.size(0) == q.size(0) && m.size(1) == 1 &&
         m.size(2) == 1 && m.size(3) == S;
  return fits ? m.reshape({q.size(0), S}) : Tensor();
}

bool all_bool(const std::vector<Tensor>& masks) {
  for (const Tensor& m : masks)
    if (m.dtype() != DType::b8) return false;
  return true;
}

// Folds the masks and the pattern into one term broadcastable to the scores: bool while every
// part is bool, additive (-inf for blocked) once one is not.
Tensor combined_mask(const AttentionRequest& r) {
  Tensor mask;
  auto combine = [&](const Tensor& m) {
    if (!mask.defined()) {
      mask = m;
    } else if (mask.dtype() == DType::b8 && m.dtype() == DType::b8) {
      mask = logical_or(mask, m);
    } else {
      auto as_float = [&](const Tensor& t) {
        return t.dtype() == DType::b8 ? where(t, -kInf, zeros({}, {r.q.dtype(), r.q.device()}))
                                      : t.to(r.q.dtype());
      };
      mask = add(as_float(mask), as_float(m));
    }
  };
  for (const Tensor& m : r.masks) combine(m);
  if (r.pattern.sparse())
    combine(pattern_mask(r.pattern, r.q.size(-2), r.k.size(-2), r.q.device()));
  return mask;
}

// Applies a bool (blocked = true) or additive mask to scores.
Tensor apply_mask(const Tensor& scores, const Tensor& mask) {
  if (!mask.defined()) return scores;
  if (mask.dtype() == DType::b8) return masked_fill(scores, mask, -kInf);
  return add(scores, mask.dtype() == scores.dtype() ? mask : mask.to(scores.dtype()));
}

AttentionOutput composed_attention(const AttentionRequest& r) {
  const Tensor &q = r.q, &k = r.k, &v = r.v;
  const double s = r.scale > 0 ? r.scale : 1.0 / std::sqrt(double(q.size(-1)));
  Tensor scores = apply_mask(mul(matmul(q, k.transpose(-2, -1)), s), combined_mask(r));
  if (r.pattern.causal)
    scores = masked_fill(scores, causal_mask(q.size(-2), k.size(-2), q.device()), -kInf);
  Tensor weights = softmax(scores, -1);
  Tensor dropped = r.dropout_p > 0 ? dropout(weights, r.dropout_p, true) : weights;
  return {matmul(dropped, v), weights};
}

}  // namespace

Tensor causal_mask(int64_t T, int64_t S, Device device) {
  if (S < 0) S = T;
  Tensor rows = arange(0, double(T), 1, {DType::f32, device}).reshape({T, 1});
  Tensor cols = arange(0, double(S), 1, {DType::f32, device}).reshape({1, S});
  return gt(cols, rows);
}

AttentionKernel choose_attention_kernel(const AttentionRequest& r) {
  if (r.need_weights || !r.allow_memory_efficient || !all_bool(r.masks))
    return AttentionKernel::composed;
  if (r.q.dim() == 4 && r.q.size(-2) == 1 && r.dropout_p == 0 && !r.pattern.causal &&
      !r.pattern.sparse()) {
    bool fits = false;
    const Tensor padding = key_padding_of(r.masks, r.q, r.k.size(-2), fits);
    if (fits && decode_attention_supported(r.q, r.k, r.v, padding))
      return AttentionKernel::single_query;
  }
  // Dropout drawn by example (engine/example_draws.h) is the backend's to support or refuse: the
  // CPU's kernels draw it, others leave it to dropout() on the composed weights.
  if (efficient_attention_supported(r.q, r.k, r.v, r.masks, r.pattern, r.dropout_p))
    return AttentionKernel::fused;
  return AttentionKernel::composed;
}

AttentionOutput compute_attention(const AttentionRequest& r) {
  switch (choose_attention_kernel(r)) {
    case AttentionKernel::single_query: {
      bool fits = false;
      const Tensor padding = key_padding_of(r.masks, r.q, r.k.size(-2), fits);
      return {decode_attention(r.q, r.k, r.v, padding, r.scale), Tensor()};
    }
    case AttentionKernel::fused:
      return {efficient_attention(r.q, r.k, r.v, r.masks, r.pattern, r.scale, r.dropout_p),
              Tensor()};
    case AttentionKernel::composed:
      break;
  }
  return composed_attention(r);
}

}  // namespace qkv::nn
