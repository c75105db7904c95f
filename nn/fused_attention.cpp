#include "nn/fused_attention.h"

#include <algorithm>
#include <cmath>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/op_declaration.h"

namespace qkv::nn {

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

bool fused_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                               const std::vector<Tensor>& masks, const AttentionPattern& pattern) {
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim()) return false;
  const Device device = q.device();
  if (device.is_cpu() || k.device() != device || v.device() != device) return false;
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) return false;
  for (int i = 0; i < q.dim() - 2; ++i)
    if (k.size(i) != q.size(i) || v.size(i) != q.size(i)) return false;
  const int64_t d = q.size(-1);
  if (k.size(-1) != d || v.size(-1) != d || v.size(-2) != k.size(-2)) return false;
  const Shape lead(q.shape().begin(), q.shape().end() - 2);
  int64_t batch_heads = 1;
  for (int64_t x : lead) batch_heads *= x;
  if (!q.backend().supports_fused_attention(q.dtype(), d, batch_heads)) return false;
  if (pattern.sparse()) return false;
  for (const Tensor& m : masks)
    if (m.defined() &&
        (m.device() != device || !key_padding_extent(m, lead, q.size(-2), k.size(-2))))
      return false;
  return true;
}

// The backward is the fused attention kernel (recomputed scores).
QKV_RECORDED_OP("efficient_attention", "nn", kernel);
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                       const std::vector<Tensor>& masks, const AttentionPattern& pattern,
                       double scale) {
  QKV_CHECK(fused_attention_supported(q, k, v, masks, pattern), "efficient_attention", "the ",
            q.device().str(), " backend has no fused attention for ", dtype_name(q.dtype()),
            " q, k, v ", shape_str(q.shape()), ", ", shape_str(k.shape()), ", ",
            shape_str(v.shape()), " with these masks (see nn/fused_attention.h)");
  const Shape lead(q.shape().begin(), q.shape().end() - 2);
  const int64_t T = q.size(-2), S = k.size(-2), d = q.size(-1);
  const FusedMaskPlan plan = *plan_fused_masks(masks, pattern, lead, T, S);
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(double(d));
  const Shape q4{plan.batch, plan.heads, T, d}, k4{plan.batch, plan.heads, S, d};
  Tensor qc = q.detach().contiguous().reshape(q4), kc = k.detach().contiguous().reshape(k4),
         vc = v.detach().contiguous().reshape(k4);
  Tensor out = Tensor::empty(q4, q.dtype(), q.device());
  Tensor lse = Tensor::empty({plan.batch, plan.heads, T}, q.dtype(), q.device());
  q.backend().fused_attention_forward(qc, kc, vc, plan.key_padding, plan.causal, s, out, lse);

  return record("efficient_attention", {q, k, v}, out.reshape(q.shape()),
                [plan, s, qc, kc, vc, o = out.detach(), lse, q_shape = q.shape(),
                 k_shape = k.shape(), v_shape = v.shape()](const Tensor& gy) -> grads {
                  Tensor g = gy.contiguous().reshape(o.shape());
                  Tensor gq = Tensor::empty(qc.shape(), qc.dtype(), qc.device()),
                         gk = Tensor::empty(kc.shape(), kc.dtype(), kc.device()),
                         gv = Tensor::empty(vc.shape(), vc.dtype(), vc.device());
                  qc.backend().fused_attention_backward(qc, kc, vc, plan.key_padding, plan.causal,
                                                        s, o, lse, g, gq, gk, gv);
                  return grads{gq.reshape(q_shape), gk.reshape(k_shape), gv.reshape(v_shape)};
                });
}

}  // namespace qkv::nn
