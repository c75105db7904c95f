// Classifiers: a transformer over token sequences, a small residual CNN (optionally with SE or
// CBAM attention) and a small Vision Transformer. Each has a config that round-trips through
// JSON, so a run folder's config.json rebuilds the model.
#pragma once

#include <nlohmann/json.hpp>

#include "models/attention_maps.h"
#include "nn/embedding.h"
#include "nn/pooling.h"
#include "nn/residual_block.h"
#include "nn/transformer.h"

namespace qkv::models {

// ---- TransformerClassifier -------------------------------------------------------------------
struct TransformerClassifierConfig {
  int64_t vocab = 0, num_classes = 2;
  int64_t d_model = 64, num_heads = 4, num_layers = 2, dim_feedforward = 128;
  double dropout = 0.1;
  int64_t max_len = 256;
  std::string positional = "sinusoidal";
  bool norm_first = false;
  std::string pooling = "cls";  // cls | mean
};
// JSON: every field by name; keys absent from the JSON keep their defaults.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TransformerClassifierConfig, vocab, num_classes,
                                                d_model, num_heads, num_layers, dim_feedforward,
                                                dropout, max_len, positional, norm_first, pooling)

class TransformerClassifier : public nn::Module {
 public:
  explicit TransformerClassifier(const TransformerClassifierConfig& config);
  // ids [B, T] int64, pad_mask [B, T] bool (true = pad) or undefined -> logits [B, num_classes].
  // "cls" prepends a learned [CLS] vector and classifies its final state; "mean" averages the
  // final states of the non-pad positions.
  Tensor forward(const Tensor& ids, const Tensor& pad_mask = Tensor());
  // Per-head self-attention weights of the last forward ("encoder.<i>.self"); position 0 is
  // the [CLS] token when pooling is cls.
  void set_record_attention(bool on) { models::set_record_attention(*encoder, on); }
  std::vector<AttentionMap> attention_maps() const {
    std::vector<AttentionMap> maps;
    append_attention_maps(*encoder, "encoder", maps);
    return maps;
  }
  std::string describe() const override { return "TransformerClassifier"; }

  TransformerClassifierConfig config;
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::PositionalEncoding> pos;
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<nn::Linear> head;
  Tensor cls_token;  // [1, 1, d_model] with "cls"
};

// ---- CnnClassifier ---------------------------------------------------------------------------
struct CnnClassifierConfig {
  int64_t in_channels = 1, image_size = 28, num_classes = 10;
  std::vector<int64_t> channels{16, 32};  // one residual block each; every block after the
                                          // first halves the resolution
  std::string attention = "none";         // none | se | cbam
  int64_t reduction = 4;
};
// JSON: every field by name; keys absent from the JSON keep their defaults.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CnnClassifierConfig, in_channels, image_size,
                                                num_classes, channels, attention, reduction)

class CnnClassifier : public nn::Module {
 public:
  explicit CnnClassifier(const CnnClassifierConfig& config);
  // images [B, in_channels, image_size, image_size] -> logits [B, num_classes]
  Tensor forward(const Tensor& images);
  // Of the last forward, per block: SE channel weights [B, C] / CBAM spatial maps [B, H, W]
  // (empty for blocks without that attention).
  std::vector<Tensor> se_weights() const;
  std::vector<Tensor> cbam_spatial_maps() const;
  std::string describe() const override { return "CnnClassifier"; }

  CnnClassifierConfig config;
  std::shared_ptr<nn::Conv2d> stem;
  std::shared_ptr<nn::BatchNorm2d> stem_bn;
  std::vector<std::shared_ptr<nn::ResidualBlock>> blocks;
  std::shared_ptr<nn::Linear> head;
};

// ---- VisionTransformer -----------------------------------------------------------------------
struct VisionTransformerConfig {
  int64_t in_channels = 1, image_size = 28, patch_size = 7, num_classes = 10;
  int64_t d_model = 64, num_heads = 4, num_layers = 2, dim_feedforward = 128;
  double dropout = 0.0;
};
// JSON: every field by name; keys absent from the JSON keep their defaults.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(VisionTransformerConfig, in_channels, image_size,
                                                patch_size, num_classes, d_model, num_heads,
                                                num_layers, dim_feedforward, dropout)

// ViT (Dosovitskiy et al.): non-overlapping patches embedded by a strided convolution, a [CLS]
// token, learned positions, a pre-norm encoder, and a linear head on the [CLS] state.
class VisionTransformer : public nn::Module {
 public:
  explicit VisionTransformer(const VisionTransformerConfig& config);
  Tensor forward(const Tensor& images);
  // Per-head self-attention weights of the last forward ("encoder.<i>.self"); position 0 is
  // the [CLS] token.
  void set_record_attention(bool on) { models::set_record_attention(*encoder, on); }
  std::vector<AttentionMap> attention_maps() const {
    std::vector<AttentionMap> maps;
    append_attention_maps(*encoder, "encoder", maps);
    return maps;
  }
  std::string describe() const override { return "VisionTransformer"; }

  VisionTransformerConfig config;
  std::shared_ptr<nn::Conv2d> patch_embed;
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<nn::Linear> head;
  Tensor cls_token, pos_embed;
};

}  // namespace qkv::models
