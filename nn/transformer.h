// Transformer encoder and decoder layers and stacks (Vaswani et al.), batch first.
//
// Each layer is: sublayer -> dropout -> residual add, with LayerNorm either after the add
// (post-norm, the original paper and PyTorch's default) or at the sublayer's input (pre-norm,
// norm_first, which trains more easily without warmup). A pre-norm stack ends with a final
// LayerNorm, since the residual stream itself is never normalized.
#pragma once

#include "nn/attention.h"
#include "nn/feed_forward.h"
#include "nn/layer_norm.h"
#include "nn/positional.h"

namespace qkv::nn {

struct TransformerLayerOptions {
  int64_t d_model = 64;
  int64_t num_heads = 4;
  int64_t dim_feedforward = 256;
  double dropout = 0.1;
  std::string activation = "relu";
  bool norm_first = false;
  // In-attention positional scheme for self-attention ("relative", "rope", "alibi"); other
  // names (the input-level "sinusoidal", "learned") or "" add nothing inside attention.
  std::string positional;
  // Recompute each layer's activations during backward instead of keeping them (nn/checkpoint.h):
  // training memory drops to one layer's activations for about one extra forward pass.
  bool checkpoint_activations = false;
};

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& options);
  // src [B, S, D]; src_key_padding_mask [B, S] true = pad; src_mask [S, S] optional.
  Tensor forward(const Tensor& src, const Tensor& src_key_padding_mask = Tensor(),
                 const Tensor& src_mask = Tensor(), bool is_causal = false);
  std::string describe() const override { return "TransformerEncoderLayer"; }
  // The layer's computation, without checkpointing.
  Tensor compute(const Tensor& src, const Tensor& src_key_padding_mask, const Tensor& src_mask,
                 bool is_causal);

  TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<FeedForward> feed_forward;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;
};

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& options);
  // tgt [B, T, D] attends causally to itself, then to memory [B, S, D].
  Tensor forward(const Tensor& tgt, const Tensor& memory,
                 const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = true);
  std::string describe() const override { return "TransformerDecoderLayer"; }
  Tensor compute(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_key_padding_mask,
                 const Tensor& memory_key_padding_mask, bool tgt_is_causal);

  // Incremental decoding: the keys and values this layer has computed so far.
  struct Cache {
    MultiheadAttention::KVCache self, cross;
    void select_rows(const Tensor& rows) {  // see KVCache::select_rows
      self.select_rows(rows);
      cross.select_rows(rows);
    }
  };
  // One new position x [B, 1, D] of the target, attending to the cached earlier ones; equal to
  // the last row of forward() over the whole prefix.
  Tensor forward_step(const Tensor& x, const Tensor& memory, const Tensor& memory_key_padding_mask,
                      Cache& cache);

  TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn, cross_attn;
  std::shared_ptr<FeedForward> feed_forward;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout1, dropout2, dropout3;
};

class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& options, int64_t num_layers);
  Tensor forward(const Tensor& src, const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);
  std::string describe() const override { return "TransformerEncoder"; }
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // only with norm_first
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& options, int64_t num_layers);
  Tensor forward(const Tensor& tgt, const Tensor& memory,
                 const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());
  std::string describe() const override { return "TransformerDecoder"; }
  // One decoding step through every layer; `caches` grows to one entry per layer on first use.
  Tensor forward_step(const Tensor& x, const Tensor& memory, const Tensor& memory_key_padding_mask,
                      std::vector<TransformerDecoderLayer::Cache>& caches);
  std::vector<std::shared_ptr<TransformerDecoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // only with norm_first
};

}  // namespace qkv::nn
