// MultiheadAttention at inference, one step at a time: the KV cache and the cached forward.
#include <algorithm>

#include "engine/error.h"
#include "nn/attention.h"

namespace qkv::nn {

void KVCache::append(const Tensor& k_new, const Tensor& v_new) {
  const char* op = "KVCache::append";
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

bool KVCache::fuse_projections(const MultiheadAttention& attention, const Tensor& query,
                               const Tensor& key, const Tensor& value) {
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

void KVCache::select_rows(const Tensor& rows) {
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
  AttentionRequest request{q, cache.k, cache.v};
  if (key_padding_mask.defined())
    request.masks.push_back(key_padding_mask.reshape({B, 1, 1, cache.k.size(2)}));
  const Tensor o = compute_attention(request).output;
  return out_proj->forward(o.transpose(1, 2).reshape({B, T, embed_dim}));
}

}  // namespace qkv::nn
