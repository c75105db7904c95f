#include "engine/fused_attention_plan.h"

#include <algorithm>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"

namespace qkv {

namespace {

// The mask's shape with leading 1s up to `rank` dims.
Shape right_aligned(const Shape& shape, size_t rank) {
  Shape padded(rank - shape.size(), 1);
  padded.insert(padded.end(), shape.begin(), shape.end());
  return padded;
}

// How many leading dims a key-padding mask varies over (one past the last of size > 1), or
// nothing when the mask is not key padding: not bool, not broadcastable to the scores
// [lead..., T, S], or different for different queries.
std::optional<size_t> key_padding_extent(const Tensor& mask, const Shape& lead, int64_t T,
                                         int64_t S) {
  const size_t L = lead.size();
  if (mask.dtype() != DType::b8 || mask.shape().size() > L + 2) return std::nullopt;
  Shape scores = lead;
  scores.push_back(T);
  scores.push_back(S);
  const Shape padded = right_aligned(mask.shape(), L + 2);
  for (size_t i = 0; i < L + 2; ++i)
    if (padded[i] != 1 && padded[i] != scores[i]) return std::nullopt;
  if (padded[L] != 1) return std::nullopt;
  size_t extent = 0;
  for (size_t i = 0; i < L; ++i)
    if (padded[i] != 1) extent = i + 1;
  return extent;
}

Shape lead_of(const Tensor& q) { return Shape(q.shape().begin(), q.shape().end() - 2); }

}  // namespace

std::optional<FusedMaskPlan> plan_fused_masks(const std::vector<Tensor>& masks,
                                              const AttentionPattern& pattern, const Shape& lead,
                                              int64_t T, int64_t S) {
  if (pattern.sparse()) return std::nullopt;
  size_t extent = 0;
  for (const Tensor& m : masks) {
    if (!m.defined()) continue;
    const std::optional<size_t> e = key_padding_extent(m, lead, T, S);
    if (!e) return std::nullopt;
    extent = std::max(extent, *e);
  }
  FusedMaskPlan plan;
  plan.causal = pattern.causal;
  for (size_t i = 0; i < lead.size(); ++i) (i < extent ? plan.batch : plan.heads) *= lead[i];
  // Each mask as [lead[0], ..., lead[extent - 1], S]: its query dim and the leading dims past
  // `extent` are all 1, so dropping them is a reshape; the rest broadcasts.
  Shape rows(lead.begin(), lead.begin() + std::ptrdiff_t(extent));
  rows.push_back(S);
  for (const Tensor& m : masks) {
    if (!m.defined()) continue;
    const Shape own = right_aligned(m.shape(), lead.size() + 2);
    Shape kept(own.begin(), own.begin() + std::ptrdiff_t(extent));
    kept.push_back(own.back());
    const Tensor padding = m.reshape(kept).expand(rows).reshape({plan.batch, S});
    plan.key_padding = plan.key_padding.defined() ? logical_or(plan.key_padding, padding) : padding;
  }
  if (plan.key_padding.defined()) plan.key_padding = plan.key_padding.contiguous();
  return plan;
}

bool fits_fused_kernel(const Backend& backend, const AttentionProblem& p) {
  const Tensor &q = p.q, &k = p.k, &v = p.v;
  if (p.dropout.p != 0) return false;
  const int64_t d = q.size(-1);
  if (k.size(-1) != d || v.size(-1) != d) return false;
  const Shape lead = lead_of(q);
  if (!backend.supports_fused_attention(q.dtype(), d, p.batch())) return false;
  if (p.pattern.sparse()) return false;
  for (const Tensor& m : p.masks)
    if (m.defined() &&
        (m.device() != q.device() || !key_padding_extent(m, lead, q.size(-2), k.size(-2))))
      return false;
  return true;
}

AttentionForward fused_kernel_forward(Backend& backend, const AttentionProblem& p) {
  QKV_CHECK(fits_fused_kernel(backend, p), "efficient_attention", "the ", backend.device().str(),
            " backend has no fused attention for ", dtype_name(p.q.dtype()), " q, k, v ",
            shape_str(p.q.shape()), ", ", shape_str(p.k.shape()), ", ", shape_str(p.v.shape()),
            " with these masks (see engine/fused_attention_plan.h)");
  const int64_t T = p.q.size(-2), S = p.k.size(-2), d = p.q.size(-1);
  const FusedMaskPlan plan = *plan_fused_masks(p.masks, p.pattern, lead_of(p.q), T, S);
  const Shape q4{plan.batch, plan.heads, T, d}, k4{plan.batch, plan.heads, S, d};
  Tensor qc = p.q.contiguous().reshape(q4), kc = p.k.contiguous().reshape(k4),
         vc = p.v.contiguous().reshape(k4);
  Tensor out = Tensor::empty(q4, p.q.dtype(), p.q.device());
  Tensor lse = Tensor::empty({plan.batch, plan.heads, T}, p.q.dtype(), p.q.device());
  backend.fused_attention_forward(qc, kc, vc, plan.key_padding, plan.causal, p.scale, out, lse);
  return {out.reshape(p.q.shape()), lse, {qc, kc, vc, out.detach(), plan.key_padding}};
}

AttentionGradients fused_kernel_backward(Backend& backend, const AttentionProblem& p,
                                         const AttentionForward& forward, const Tensor& grad_out) {
  const Tensor &qc = forward.saved[0], &kc = forward.saved[1], &vc = forward.saved[2],
               &out = forward.saved[3], &key_padding = forward.saved[4];
  Tensor g = grad_out.contiguous().reshape(out.shape());
  Tensor gq = Tensor::empty(qc.shape(), qc.dtype(), qc.device()),
         gk = Tensor::empty(kc.shape(), kc.dtype(), kc.device()),
         gv = Tensor::empty(vc.shape(), vc.dtype(), vc.device());
  backend.fused_attention_backward(qc, kc, vc, key_padding, p.pattern.causal, p.scale, out,
                                   forward.lse, g, gq, gk, gv);
  return {gq.reshape(p.q.shape()), gk.reshape(p.k.shape()), gv.reshape(p.v.shape())};
}

}  // namespace qkv
