#include "nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.h"
#include "nn/decode_attention.h"
#include "nn/efficient_attention.h"
#include "nn/init.h"

namespace qkv::nn {

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// Applies a bool (blocked = true) or additive mask to scores.
Tensor apply_mask(const Tensor& scores, const Tensor& mask, const char* op) {
  if (!mask.defined()) return scores;
  if (mask.dtype() == DType::b8) return masked_fill(scores, mask, -kInf);
  QKV_CHECK(is_floating(mask.dtype()), op, "mask must be bool or floating, got ",
            dtype_name(mask.dtype()));
  return add(scores, mask.dtype() == scores.dtype() ? mask : mask.to(scores.dtype()));
}

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

Tensor causal_mask(int64_t T, int64_t S, Device device) {
  if (S < 0) S = T;
  Tensor rows = arange(0, double(T), 1, {DType::f32, device}).reshape({T, 1});
  Tensor cols = arange(0, double(S), 1, {DType::f32, device}).reshape({1, S});
  return gt(cols, rows);
}

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
  double s = scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  const bool bool_or_no_mask = !attn_mask.defined() || attn_mask.dtype() == DType::b8;
  AttentionPattern pattern;
  pattern.causal = is_causal;
  if (!need_weights && bool_or_no_mask &&
      efficient_attention_supported(q, k, v, {attn_mask}, pattern, dropout_p))
    return {efficient_attention(q, k, v, {attn_mask}, pattern, s, dropout_p), Tensor()};
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), s);
  scores = apply_mask(scores, attn_mask, op);
  if (is_causal)
    scores = masked_fill(scores, causal_mask(q.size(-2), k.size(-2), q.device()), -kInf);
  Tensor weights = softmax(scores, -1);
  Tensor dropped = dropout_p > 0 ? dropout(weights, dropout_p, true) : weights;
  return {matmul(dropped, v), weights};
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
  Tensor q = heads(q_proj->forward(query), T);
  Tensor k = heads(k_proj->forward(key), S);
  Tensor v = heads(v_proj->forward(value), S);
  if (position) position->rotate(q, k);

  // Bool masks stay separate for the memory-efficient kernel, which reads each in place; the
  // naive kernel gets them all folded into one term broadcastable to [B, H, T, S].
  std::vector<Tensor> bool_masks, float_terms;
  auto add_term = [&](const Tensor& m) {
    (m.dtype() == DType::b8 ? bool_masks : float_terms).push_back(m);
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

  const double p_drop = is_training() ? dropout : 0.0;
  const bool want_weights = need_weights || record_weights;
  AttentionPattern efficient_pattern = pattern;
  efficient_pattern.causal = pattern.causal || is_causal;
  if (memory_efficient && !want_weights && float_terms.empty() &&
      efficient_attention_supported(q, k, v, bool_masks, efficient_pattern, p_drop)) {
    Tensor o = efficient_attention(q, k, v, bool_masks, efficient_pattern, -1, p_drop);
    return {out_proj->forward(o.transpose(1, 2).reshape({B, T, embed_dim})), Tensor()};
  }

  Tensor mask;
  auto combine = [&](Tensor m) {
    if (!mask.defined()) {
      mask = m;
    } else if (mask.dtype() == DType::b8 && m.dtype() == DType::b8) {
      mask = logical_or(mask, m);
    } else {
      auto as_float = [&](const Tensor& t) {
        return t.dtype() == DType::b8 ? where(t, -kInf, zeros({}, {q.dtype(), q.device()}))
                                      : t.to(q.dtype());
      };
      mask = add(as_float(mask), as_float(m));
    }
  };
  for (const Tensor& m : bool_masks) combine(m);
  for (const Tensor& m : float_terms) combine(m);
  if (pattern.sparse()) combine(pattern_mask(pattern, T, S, q.device()));

  AttentionOutput a =
      scaled_dot_product_attention(q, k, v, mask, is_causal || pattern.causal, p_drop);
  Tensor merged = a.output.transpose(1, 2).reshape({B, T, embed_dim});
  AttentionOutput out{out_proj->forward(merged), Tensor()};
  if (record_weights) {
    last_weights = a.weights.detach();
    last_q = q.detach(), last_k = k.detach(), last_v = v.detach();
  }
  if (need_weights) out.weights = average_attn_weights ? mean(a.weights, {1}) : a.weights;
  return out;
}

std::string MultiheadAttention::describe() const {
  return "MultiheadAttention(embed_dim=" + std::to_string(embed_dim) +
         ", num_heads=" + std::to_string(num_heads) + ")";
}

}  // namespace qkv::nn

namespace qkv::nn {

void MultiheadAttention::KVCache::append(const Tensor& k_new, const Tensor& v_new) {
  const char* op = "MultiheadAttention::KVCache::append";
  QKV_CHECK(k_new.dim() == 4 && v_new.dim() == 4 && k_new.size(2) == v_new.size(2), op,
            "expects keys and values [B, H, t, d], got ", shape_str(k_new.shape()), " and ",
            shape_str(v_new.shape()));
  if (grad_enabled() && (k_new.requires_grad() || v_new.requires_grad())) {
    k = k.defined() ? cat({k, k_new}, 2) : k_new;
    v = v.defined() ? cat({v, v_new}, 2) : v_new;
    k_buffer = v_buffer = Tensor();  // the next append without a gradient starts a buffer
    return;
  }
  const int64_t used = k.defined() ? k.size(2) : 0, t = k_new.size(2);
  if (!k_buffer.defined() || used + t > k_buffer.size(2)) {
    const int64_t capacity = std::max<int64_t>(16, 2 * (used + t));
    auto grow = [&](const Tensor& kept, const Tensor& like) {
      Shape shape = like.shape();
      shape[2] = capacity;
      Tensor buffer = Tensor::empty(shape, like.dtype(), like.device());
      if (used > 0) copy_(buffer.narrow(2, 0, used), kept);
      return buffer;
    };
    k_buffer = grow(k, k_new);
    v_buffer = grow(v, v_new);
  }
  copy_(k_buffer.narrow(2, used, t), k_new);
  copy_(v_buffer.narrow(2, used, t), v_new);
  k = k_buffer.narrow(2, 0, used + t);
  v = v_buffer.narrow(2, 0, used + t);
}

bool MultiheadAttention::KVCache::fuse_projections(const MultiheadAttention& attention,
                                                   const Tensor& query, const Tensor& key,
                                                   const Tensor& value) {
  const Linear *q = attention.q_proj.get(), *k = attention.k_proj.get(),
               *v = attention.v_proj.get();
  const bool applies = !grad_enabled() && query.impl() == key.impl() &&
                       key.impl() == value.impl() && !q->quantized && !k->quantized &&
                       !v->quantized && q->bias.defined() == k->bias.defined() &&
                       k->bias.defined() == v->bias.defined();
  if (!applies) return false;
  if (!qkv_weight.defined()) {
    qkv_weight = cat({q->weight, k->weight, v->weight}, 0);
    if (q->bias.defined()) qkv_bias = cat({q->bias, k->bias, v->bias}, 0);
  }
  return true;
}

void MultiheadAttention::KVCache::select_rows(const Tensor& rows) {
  if (!k.defined()) return;
  if (!k_buffer.defined()) {  // cross-attention's fixed keys and values
    k = index_select(k, 0, rows), v = index_select(v, 0, rows);
    return;
  }
  // One copy per step: the selected rows of the whole buffers, spare room included (at most as
  // much again as the used part), so the new buffers keep growing in place.
  const int64_t used = k.size(2);
  k_buffer = index_select(k_buffer, 0, rows);
  v_buffer = index_select(v_buffer, 0, rows);
  k = k_buffer.narrow(2, 0, used);
  v = v_buffer.narrow(2, 0, used);
}

Tensor MultiheadAttention::forward_cached(const Tensor& query, const Tensor& key,
                                          const Tensor& value, KVCache& cache, bool static_kv,
                                          const Tensor& key_padding_mask) {
  const char* op = "MultiheadAttention::forward_cached";
  QKV_CHECK(!position, op, "in-attention positional schemes need the whole prefix");
  QKV_CHECK(query.dim() == 3 && (static_kv || query.size(1) == 1), op,
            "self-attention decodes one token per step, got query ", shape_str(query.shape()));
  const int64_t B = query.size(0);
  auto heads = [&](const Tensor& x) {
    return x.reshape({B, x.size(1), num_heads, head_dim}).transpose(1, 2);
  };
  if (!static_kv && cache.fuse_projections(*this, query, key, value)) {
    // Self-attention at inference: one [3E, E] product gives q, k and v (see KVCache).
    const Tensor qkv = linear(query, cache.qkv_weight, cache.qkv_bias);
    cache.append(heads(qkv.narrow(2, embed_dim, embed_dim)),
                 heads(qkv.narrow(2, 2 * embed_dim, embed_dim)));
    return attend(heads(qkv.narrow(2, 0, embed_dim)), cache, key_padding_mask);
  }
  Tensor q = heads(q_proj->forward(query));
  if (!static_kv || !cache.k.defined()) {
    Tensor k = heads(k_proj->forward(key)), v = heads(v_proj->forward(value));
    if (static_kv)
      cache.k = k.contiguous(), cache.v = v.contiguous();
    else
      cache.append(k, v);
  }
  return attend(q, cache, key_padding_mask);
}

// The cached step's attention of q [B, H, T, head_dim] to everything in the cache, then out_proj.
Tensor MultiheadAttention::attend(const Tensor& q, const KVCache& cache,
                                  const Tensor& key_padding_mask) {
  const int64_t B = q.size(0), T = q.size(2);
  // One new token per step and no graph: the direct single-query loop, not the tiled kernel.
  if (T == 1 && !grad_enabled() && q.device().is_cpu() &&
      (q.dtype() == DType::f32 || q.dtype() == DType::f64) &&
      (!key_padding_mask.defined() || key_padding_mask.dtype() == DType::b8))
    return out_proj->forward(
        decode_attention(q, cache.k, cache.v, key_padding_mask).reshape({B, 1, embed_dim}));
  std::vector<Tensor> masks;
  if (key_padding_mask.defined())
    masks.push_back(key_padding_mask.reshape({B, 1, 1, cache.k.size(2)}));
  Tensor o =
      efficient_attention_supported(q, cache.k, cache.v, masks)
          ? efficient_attention(q, cache.k, cache.v, masks)
          : scaled_dot_product_attention(q, cache.k, cache.v, masks.empty() ? Tensor() : masks[0])
                .output;
  return out_proj->forward(o.transpose(1, 2).reshape({B, T, embed_dim}));
}

}  // namespace qkv::nn
