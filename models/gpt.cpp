#include "models/gpt.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "nn/decode_attention.h"
#include "nn/init.h"

namespace qkv::models {

namespace {

void check_config(const GPTConfig& c) {
  const char* op = "GPT";
  QKV_CHECK(c.vocab > 0, op, "vocab must be positive, got ", c.vocab);
  QKV_CHECK(c.context > 0, op, "context must be positive, got ", c.context);
  QKV_CHECK(c.d_model > 0 && c.num_heads > 0 && c.d_model % c.num_heads == 0, op, "d_model ",
            c.d_model, " must be a positive multiple of num_heads ", c.num_heads);
  QKV_CHECK(c.num_layers > 0, op, "num_layers must be positive, got ", c.num_layers);
  QKV_CHECK(c.dim_feedforward > 0, op, "dim_feedforward must be positive, got ", c.dim_feedforward);
  QKV_CHECK(c.dropout >= 0 && c.dropout < 1, op, "dropout must be in [0, 1), got ", c.dropout);
  QKV_CHECK(c.positions == "learned" || c.positions == "rope", op,
            "positions must be learned or rope, got '", c.positions, "'");
  QKV_CHECK(c.positions != "rope" || (c.d_model / c.num_heads) % 2 == 0, op,
            "rope needs an even head dimension, got ", c.d_model / c.num_heads);
}

void init_linear(nn::Linear& linear, double std) {
  nn::init::normal_(linear.weight, 0.0, std);
  if (linear.bias.defined()) nn::init::zeros_(linear.bias);
}

}  // namespace

GPT::GPT(const GPTConfig& c) : config(c) {
  check_config(c);
  nn::TransformerLayerOptions o{.d_model = c.d_model,
                                .num_heads = c.num_heads,
                                .dim_feedforward = c.dim_feedforward,
                                .dropout = c.dropout,
                                .activation = "gelu",
                                .norm_first = true,
                                .positional = c.positions == "rope" ? "rope" : ""};
  token_embedding =
      register_module("token_embedding", std::make_shared<nn::Embedding>(c.vocab, c.d_model));
  if (c.positions == "learned")
    position_embedding =
        register_module("position_embedding",
                        std::make_shared<nn::LearnedPositionalEncoding>(c.d_model, c.context));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
  blocks = register_module("blocks", std::make_shared<nn::TransformerEncoder>(o, c.num_layers));
  if (!c.tie_embeddings)
    lm_head = register_module("lm_head", std::make_shared<nn::Linear>(c.d_model, c.vocab, false));

  // GPT-2's initialisation (see the header).
  const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * double(c.num_layers));
  nn::init::normal_(token_embedding->weight, 0.0, std);
  if (position_embedding) nn::init::normal_(position_embedding->weight, 0.0, std);
  for (auto& block : blocks->layers) {
    nn::MultiheadAttention& a = *block->self_attn;
    for (nn::Linear* l : {a.q_proj.get(), a.k_proj.get(), a.v_proj.get()}) init_linear(*l, std);
    init_linear(*a.out_proj, residual_std);
    init_linear(*block->feed_forward->linear1, std);
    init_linear(*block->feed_forward->linear2, residual_std);
  }
  if (lm_head) init_linear(*lm_head, std);
}

Tensor GPT::embed(const Tensor& ids, int64_t offset) {
  Tensor x = token_embedding->forward(ids);
  if (position_embedding) x = position_embedding->forward(x, offset);
  return dropout->forward(x);
}

Tensor GPT::logits(const Tensor& hidden) {
  return lm_head ? lm_head->forward(hidden) : linear(hidden, token_embedding->weight);
}

Tensor GPT::forward(const Tensor& ids) {
  QKV_CHECK(ids.dim() == 2 && ids.dtype() == DType::i64, "GPT", "expected int64 ids [B, T], got ",
            shape_str(ids.shape()));
  QKV_CHECK(ids.size(1) >= 1 && ids.size(1) <= config.context, "GPT", "sequence length ",
            ids.size(1), " is outside 1..context (", config.context, ")");
  return logits(blocks->forward(embed(ids, 0), Tensor(), /*is_causal=*/true));
}

Tensor GPT::attend_step(nn::MultiheadAttention& a, const Tensor& h, int64_t position,
                        nn::MultiheadAttention::KVCache& cache) {
  if (!a.position) return a.forward_cached(h, h, h, cache, /*static_kv=*/false);
  // RoPE: the new query and key are rotated to their own position; the cached keys already are.
  auto* rope = dynamic_cast<nn::RotaryEmbedding*>(a.position.get());
  QKV_CHECK(rope, "GPT::forward_step", "unsupported in-attention position ",
            a.position->describe());
  const int64_t B = h.size(0);
  auto heads = [&](const Tensor& x) {
    return x.reshape({B, 1, a.num_heads, a.head_dim}).transpose(1, 2);
  };
  Tensor q = rope->apply(heads(a.q_proj->forward(h)), position);
  Tensor k = rope->apply(heads(a.k_proj->forward(h)), position);
  cache.append(k, heads(a.v_proj->forward(h)));
  Tensor o = grad_enabled() ? nn::scaled_dot_product_attention(q, cache.k, cache.v).output
                            : nn::decode_attention(q, cache.k, cache.v);
  return a.out_proj->forward(o.transpose(1, 2).reshape({B, 1, a.embed_dim}));
}

Tensor GPT::forward_step(const Tensor& ids, int64_t position, Cache& cache) {
  QKV_CHECK(ids.dim() == 2 && ids.size(1) == 1 && ids.dtype() == DType::i64, "GPT::forward_step",
            "expected int64 ids [B, 1], got ", shape_str(ids.shape()));
  QKV_CHECK(position >= 0 && position < config.context, "GPT::forward_step", "position ", position,
            " is outside 0..context-1 (", config.context - 1, ")");
  cache.resize(blocks->layers.size());
  QKV_CHECK(!cache[0].k.defined() || cache[0].k.size(2) == position, "GPT::forward_step",
            "position ", position, " but the cache holds ", cache[0].k.size(2), " positions");
  Tensor x = embed(ids, position);
  for (size_t i = 0; i < blocks->layers.size(); ++i) {
    nn::TransformerEncoderLayer& block = *blocks->layers[i];
    x = add(x, block.dropout1->forward(
                   attend_step(*block.self_attn, block.norm1->forward(x), position, cache[i])));
    x = add(x, block.dropout2->forward(block.feed_forward->forward(block.norm2->forward(x))));
  }
  return logits(blocks->norm->forward(x));
}

}  // namespace qkv::models
