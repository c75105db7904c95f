// Seq2SeqTransformer: the encoder-decoder of "Attention Is All You Need", for toy translation.
//
//   src ids -> Embedding * sqrt(d) -> (+ positions) -> TransformerEncoder -> memory
//   tgt ids -> Embedding * sqrt(d) -> (+ positions) -> TransformerDecoder(memory) -> Linear ->
//   logits
//
// With tie_embeddings the output projection reuses the target embedding matrix (Press & Wolf).
// Relative, RoPE and ALiBi positions act inside self-attention; sinusoidal and learned ones are
// added to the embeddings.
#pragma once

#include <nlohmann/json.hpp>

#include "models/attention_maps.h"
#include "nn/embedding.h"
#include "nn/transformer.h"

namespace qkv::models {

struct Seq2SeqConfig {
  int64_t src_vocab = 0, tgt_vocab = 0;
  int64_t d_model = 64, num_heads = 4;
  int64_t num_encoder_layers = 2, num_decoder_layers = 2;
  int64_t dim_feedforward = 256;
  double dropout = 0.1;
  int64_t max_len = 256;
  std::string positional = "sinusoidal";  // sinusoidal | learned | relative | rope | alibi
  bool norm_first = false;
  bool tie_embeddings = false;
  int64_t pad_id = 0;
  bool checkpoint_activations = false;  // recompute layer activations in backward (less memory)
};
// JSON: every field by name; keys absent from the JSON keep their defaults.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Seq2SeqConfig, src_vocab, tgt_vocab, d_model,
                                                num_heads, num_encoder_layers, num_decoder_layers,
                                                dim_feedforward, dropout, max_len, positional,
                                                norm_first, tie_embeddings, pad_id,
                                                checkpoint_activations)

class Seq2SeqTransformer : public nn::Module {
 public:
  explicit Seq2SeqTransformer(const Seq2SeqConfig& config);

  // src_ids [B, S], tgt_in_ids [B, T] int64; pad masks bool, true = pad (may be undefined).
  // Returns logits [B, T, tgt_vocab].
  Tensor forward(const Tensor& src_ids, const Tensor& tgt_in_ids, const Tensor& src_pad_mask,
                 const Tensor& tgt_pad_mask);
  Tensor encode(const Tensor& src_ids, const Tensor& src_pad_mask);
  Tensor decode(const Tensor& tgt_in_ids, const Tensor& memory, const Tensor& src_pad_mask,
                const Tensor& tgt_pad_mask);

  // Greedy decoding under NoGrad: each sequence starts with bos and stops after eos or
  // max_len generated tokens; finished rows are padded with pad_id. Returns [B, L] int64
  // (bos included).
  Tensor greedy_decode(const Tensor& src_ids, const Tensor& src_pad_mask, int64_t bos, int64_t eos,
                       int64_t max_len);
  // Beam search per example (length-normalized log probability); same output convention.
  Tensor beam_search(const Tensor& src_ids, const Tensor& src_pad_mask, int64_t bos, int64_t eos,
                     int64_t max_len, int64_t beam);

  // Decoder logits [B, 1, V] for the token ids [B, 1] at `position`, attending to the earlier
  // positions through `caches` (filled as it goes; start with an empty vector).
  Tensor decode_step(const Tensor& ids, int64_t position, const Tensor& memory,
                     const Tensor& src_pad_mask,
                     std::vector<nn::TransformerDecoderLayer::Cache>& caches);
  // Whether greedy_decode may use the KV cache: on by default; in-attention positional schemes
  // (relative, RoPE, ALiBi) always recompute the prefix.
  bool use_kv_cache = true;
  bool can_use_kv_cache() const;

  void set_record_attention(bool on);
  std::vector<AttentionMap> attention_maps() const;

  std::string describe() const override { return "Seq2SeqTransformer"; }

  Seq2SeqConfig config;
  std::shared_ptr<nn::Embedding> src_embed, tgt_embed;
  std::shared_ptr<nn::PositionalEncoding> src_pos, tgt_pos;  // null for in-attention kinds
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<nn::TransformerDecoder> decoder;
  std::shared_ptr<nn::Linear> generator;  // output projection (weight tied when configured)
  std::shared_ptr<nn::Dropout> dropout;
};

}  // namespace qkv::models
