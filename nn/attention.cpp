#include "nn/attention.h"

#include <cmath>

#include "engine/error.h"
#include "nn/efficient_attention.h"
#include "nn/init.h"

namespace qkv::nn {

namespace {

// Masks are PyTorch's: bool (true = blocked) or floating (added to the scores).
void check_mask_dtype(const Tensor& mask, const char* op, const char* name) {
  QKV_CHECK(mask.dtype() == DType::b8 || is_floating(mask.dtype()), op, name,
            " must be bool (true = blocked) or floating (added to the scores), got ",
            dtype_name(mask.dtype()));
}

// A mask must broadcast to the scores [..., T, S]; said in attention's terms, before any kernel
// (masked_fill, the efficient kernel) gets to complain in its own.
void check_mask_shape(const Tensor& mask, const Shape& scores, const char* op) {
  bool ok = mask.shape().size() <= scores.size();
  for (size_t i = 1; ok && i <= mask.shape().size(); ++i) {
    int64_t m = mask.shape()[mask.shape().size() - i], s = scores[scores.size() - i];
    ok = m == s || m == 1;
  }
  QKV_CHECK(ok, op, "attn_mask of shape ", shape_str(mask.shape()),
            " does not broadcast to the attention scores [..., T, S] = ", shape_str(scores));
}

}  // namespace

AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& attn_mask, bool is_causal,
                                             double dropout_p, std::optional<double> scale,
                                             bool need_weights) {
  const char* op = "scaled_dot_product_attention";
  QKV_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op,
            "q, k, v need the same rank >= 2, got ", shape_str(q.shape()), ", ",
            shape_str(k.shape()), ", ", shape_str(v.shape()));
  QKV_CHECK(q.size(-1) == k.size(-1), op, "q and k feature dims differ: ", shape_str(q.shape()),
            " vs ", shape_str(k.shape()));
  QKV_CHECK(k.size(-2) == v.size(-2), op, "k and v lengths differ: ", shape_str(k.shape()), " vs ",
            shape_str(v.shape()));
  if (attn_mask.defined()) {
    check_mask_dtype(attn_mask, op, "attn_mask");
    Shape scores(q.shape().begin(), q.shape().end() - 1);
    scores.push_back(k.size(-2));
    check_mask_shape(attn_mask, scores, op);
  }
  AttentionRequest request{q, k, v};
  if (attn_mask.defined()) request.masks.push_back(attn_mask);
  request.pattern.causal = is_causal;
  request.scale = scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  request.dropout_p = dropout_p;
  request.need_weights = need_weights;
  return compute_attention(request);
}

MultiheadAttention::MultiheadAttention(int64_t E, int64_t H, double p, bool bias, int64_t kdim,
                                       int64_t vdim)
    : embed_dim(E), num_heads(H), head_dim(H > 0 ? E / H : 0), dropout(p) {
  QKV_CHECK(E > 0 && H > 0, "MultiheadAttention", "embed_dim and num_heads must be positive");
  QKV_CHECK(E % H == 0, "MultiheadAttention", "embed_dim ", E, " is not divisible by num_heads ",
            H);
  q_proj = register_module("q_proj", std::make_shared<Linear>(E, E, bias));
  k_proj = register_module("k_proj", std::make_shared<Linear>(kdim < 0 ? E : kdim, E, bias));
  v_proj = register_module("v_proj", std::make_shared<Linear>(vdim < 0 ? E : vdim, E, bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(E, E, bias));
  // PyTorch's init. With kdim = vdim = embed_dim its three projections are one in_proj_weight
  // [3E, E], Xavier-uniform over that matrix: U(-a, a), a = sqrt(6 / (E + 3E)). Otherwise each is
  // Xavier-uniform on its own [E, kdim]. Biases zero; out_proj keeps Linear's weight init.
  const bool packed = k_proj->in_features == E && v_proj->in_features == E;
  const double packed_bound = std::sqrt(6.0 / double(E + 3 * E));
  for (auto& proj : {q_proj, k_proj, v_proj}) {
    if (packed)
      init::uniform_(proj->weight, -packed_bound, packed_bound);
    else
      init::xavier_uniform_(proj->weight);
    if (bias) init::zeros_(proj->bias);
  }
  if (bias) init::zeros_(out_proj->bias);
}

void MultiheadAttention::set_position(std::shared_ptr<AttentionPosition> p) {
  if (!position && p) register_module("position", p);
  QKV_CHECK(!position || !p || position == p, "MultiheadAttention",
            "a positional scheme is already registered");
  position = std::move(p);
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                            const Tensor& value, const Tensor& key_padding_mask,
                                            const Tensor& attn_mask, bool need_weights,
                                            bool average_attn_weights, bool is_causal) {
  const char* op = "MultiheadAttention";
  QKV_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3, op,
            "expected batch-first [B, T, E] inputs, got ", shape_str(query.shape()), ", ",
            shape_str(key.shape()), ", ", shape_str(value.shape()));
  const int64_t B = query.size(0), T = query.size(1), S = key.size(1), H = num_heads;
  QKV_CHECK(key.size(0) == B && value.size(0) == B && value.size(1) == S, op,
            "batch or length mismatch: query ", shape_str(query.shape()), ", key ",
            shape_str(key.shape()), ", value ", shape_str(value.shape()));

  // [B, L, E] -> [B, H, L, head_dim]
  auto heads = [&](const Tensor& x, int64_t L) {
    return x.reshape({B, L, H, head_dim}).transpose(1, 2);
  };
  Tensor qkv, q, k, v;
  if (projects_packed(query, key, value)) {
    qkv = packed_projection(query);
    const std::array<Tensor, 3> views = packed_heads(qkv, H);
    q = views[0], k = views[1], v = views[2];
  } else {
    q = heads(q_proj->forward(query), T);
    k = heads(k_proj->forward(key), S);
    v = heads(v_proj->forward(value), S);
  }
  if (position) position->rotate(q, k);

  // Bool masks first, then additive terms: the fused kernel reads bool masks in place; the
  // composed one folds them all into one term broadcastable to [B, H, T, S].
  AttentionRequest request{q, k, v};
  std::vector<Tensor> additive;
  auto add_term = [&](const Tensor& m) {
    (m.dtype() == DType::b8 ? request.masks : additive).push_back(m);
  };
  if (key_padding_mask.defined()) {
    check_mask_dtype(key_padding_mask, op, "key_padding_mask");
    QKV_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == B &&
                  key_padding_mask.size(1) == S,
              op, "key_padding_mask must be [B, S] = [", B, ",", S, "], got ",
              shape_str(key_padding_mask.shape()));
    add_term(key_padding_mask.reshape({B, 1, 1, S}));
  }
  if (attn_mask.defined()) {
    check_mask_dtype(attn_mask, op, "attn_mask");
    Tensor m = attn_mask;
    if (m.dim() == 3) {
      QKV_CHECK(m.size(0) == B * H, op, "3-D attn_mask must be [B*H, T, S], got ",
                shape_str(m.shape()));
      m = m.reshape({B, H, m.size(1), m.size(2)});
    }
    QKV_CHECK((m.dim() == 2 || m.dim() == 4) && m.size(-2) == T && m.size(-1) == S, op,
              "attn_mask must be [T, S] = [", T, ",", S, "] (or [B*H, T, S]), got ",
              shape_str(attn_mask.shape()));
    add_term(m);
  }
  if (position) {
    Tensor bias = position->score_bias(q, S);
    if (bias.defined()) add_term(bias);
  }
  request.masks.insert(request.masks.end(), additive.begin(), additive.end());
  request.pattern = pattern;
  request.pattern.causal = pattern.causal || is_causal;
  request.dropout_p = is_training() ? dropout : 0.0;
  request.need_weights = need_weights || observer;
  request.allow_memory_efficient = memory_efficient;

  // The packed projection goes to the fused kernel whole, whose backward writes the three
  // gradients into one [B, T, 3E] tensor. Any other kernel reads the views of it made above
  // (correct, but their backward pads each gradient to 3E with zeros).
  const AttentionOutput a =
      qkv.defined() && choose_attention_kernel(request) == AttentionKernel::fused
          ? AttentionOutput{efficient_attention_packed(qkv, H, request.masks, request.pattern,
                                                       request.scale, request.dropout_p),
                            Tensor()}
          : compute_attention(request);
  Tensor merged = a.output.transpose(1, 2).reshape({B, T, embed_dim});
  AttentionOutput out{out_proj->forward(merged), Tensor()};
  if (observer) observer({a.weights.detach(), q.detach(), k.detach(), v.detach()});
  if (need_weights) out.weights = average_attn_weights ? mean(a.weights, {1}) : a.weights;
  return out;
}

// Self-attention: one tensor as query, key and value, three projections of the same width that
// run as Linear::forward would (no int8 version in use) and no rotation between the projection
// and the kernel. Each parameter keeps its own name and gradient: the product's weight is a cat
// of theirs, whose backward hands each its rows.
bool MultiheadAttention::projects_packed(const Tensor& query, const Tensor& key,
                                         const Tensor& value) const {
  const bool int8 =
      !grad_enabled() && (q_proj->quantized || k_proj->quantized || v_proj->quantized);
  return query.impl() == key.impl() && key.impl() == value.impl() && !int8 &&
         k_proj->in_features == embed_dim && v_proj->in_features == embed_dim &&
         (!position || !position->rotates());
}

Tensor MultiheadAttention::packed_projection(const Tensor& x) const {
  q_proj->check_input(x);
  const Tensor w = cat({q_proj->weight, k_proj->weight, v_proj->weight}, 0);
  const Tensor b =
      q_proj->bias.defined() ? cat({q_proj->bias, k_proj->bias, v_proj->bias}, 0) : Tensor();
  return linear(x, w, b);
}

std::string MultiheadAttention::describe() const {
  return "MultiheadAttention(embed_dim=" + std::to_string(embed_dim) +
         ", num_heads=" + std::to_string(num_heads) + ")";
}

}  // namespace qkv::nn
