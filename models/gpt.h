// GPT: a decoder-only causal transformer language model (Radford et al. 2018/2019).
//
//   ids [B, T] -> token embedding (+ learned positions) -> dropout
//              -> num_layers pre-norm blocks: x + attn(LN(x)) causal, x + MLP(LN(x)) with GELU
//              -> final LayerNorm -> output projection (the embedding matrix when tied) -> logits
//
// The blocks are nn::TransformerEncoderLayer with norm_first and is_causal (so training runs the
// memory-efficient causal attention kernel); RoPE, when chosen, rotates queries and keys inside
// each block instead of adding learned positions. Initialisation is GPT-2's: every weight matrix
// and table N(0, 0.02), the projections that write into the residual stream (attention's out_proj
// and the MLP's second layer) N(0, 0.02 / sqrt(2 * num_layers)), biases zero, LayerNorms one/zero.
#pragma once

#include <nlohmann/json.hpp>

#include "nn/embedding.h"
#include "nn/transformer.h"

namespace qkv::models {

struct GPTConfig {
  int64_t vocab = 0;
  int64_t context = 64;  // the longest sequence the model sees (learned positions have this many)
  int64_t d_model = 128, num_heads = 4, num_layers = 4;
  int64_t dim_feedforward = 512;
  double dropout = 0.0;
  std::string positions = "learned";  // learned | rope
  bool tie_embeddings = true;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GPTConfig, vocab, context, d_model, num_heads,
                                                num_layers, dim_feedforward, dropout, positions,
                                                tie_embeddings)

class GPT : public nn::Module {
 public:
  // Throws qkv::Error naming the field for a config that cannot be built.
  explicit GPT(const GPTConfig& config);

  // ids [B, T] int64 with 1 <= T <= context -> logits [B, T, vocab].
  Tensor forward(const Tensor& ids);

  // Incremental decoding. One cache per block, filled as positions are stepped through; start
  // with an empty vector at position 0.
  using Cache = std::vector<nn::MultiheadAttention::KVCache>;
  // ids [B, 1] at `position` (= the number of positions already in the cache, < context) ->
  // logits [B, 1, vocab], equal to the last row of forward() over the whole prefix.
  Tensor forward_step(const Tensor& ids, int64_t position, Cache& cache);

  std::string describe() const override { return "GPT"; }

  GPTConfig config;
  std::shared_ptr<nn::Embedding> token_embedding;
  std::shared_ptr<nn::LearnedPositionalEncoding> position_embedding;  // null with RoPE
  std::shared_ptr<nn::Dropout> dropout;
  std::shared_ptr<nn::TransformerEncoder> blocks;  // its final norm is the model's final LayerNorm
  std::shared_ptr<nn::Linear> lm_head;             // null when tied to token_embedding

 private:
  Tensor embed(const Tensor& ids, int64_t offset);
  Tensor logits(const Tensor& hidden);
  // One block's self-attention for one new position, appending its keys and values to `cache`.
  Tensor attend_step(nn::MultiheadAttention& attention, const Tensor& h, int64_t position,
                     nn::MultiheadAttention::KVCache& cache);
};

}  // namespace qkv::models
