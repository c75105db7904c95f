// Attention over CNN feature maps: Squeeze-and-Excitation (Hu et al. 2018) and CBAM (Woo et al.
// 2018). Both map [B, C, H, W] to the same shape, reweighting the input, so either slots into a
// residual block after the main branch and before the identity add.
#pragma once

#include "nn/conv.h"
#include "nn/linear.h"

namespace qkv::nn {

// SE: squeeze (global average per channel), excite (C -> C/r -> C MLP, sigmoid), scale channels.
class SEBlock : public Layer {
 public:
  explicit SEBlock(int64_t channels, int64_t reduction = 16);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "SEBlock"; }
  std::shared_ptr<Linear> fc1, fc2;
  Tensor last_weights;  // [B, C] channel weights of the last forward (detached)
};

// CBAM channel attention: sigmoid(MLP(avgpool(x)) + MLP(maxpool(x))), one MLP shared by both.
class ChannelAttention : public Layer {
 public:
  ChannelAttention(int64_t channels, int64_t reduction = 16);
  Tensor weights(const Tensor& x);  // [B, C, 1, 1]
  Tensor forward(const Tensor& x) override { return mul(x, weights(x)); }
  std::string describe() const override { return "ChannelAttention"; }
  std::shared_ptr<Linear> fc1, fc2;
};

// CBAM spatial attention: sigmoid(conv7x7([mean over C; max over C])).
class SpatialAttention : public Layer {
 public:
  explicit SpatialAttention(int64_t kernel_size = 7);
  Tensor weights(const Tensor& x);  // [B, 1, H, W]
  // The same from x's pooled maps [B, 2, H, W] (mean_amax(x, {1}), or CBAM's mean_amax_scaled).
  Tensor weights_of_maps(const Tensor& maps);
  Tensor forward(const Tensor& x) override { return mul(x, weights(x)); }
  std::string describe() const override { return "SpatialAttention"; }
  std::shared_ptr<Conv2d> conv;
};

// CBAM: channel attention, then spatial attention, applied in sequence.
class CBAM : public Layer {
 public:
  explicit CBAM(int64_t channels, int64_t reduction = 16, int64_t kernel_size = 7);
  Tensor forward(const Tensor& x) override;
  // relu(residual + forward(x)), residual of x's shape: a residual block's end, in one pass.
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  std::string describe() const override { return "CBAM"; }
  std::shared_ptr<ChannelAttention> channel;
  std::shared_ptr<SpatialAttention> spatial;
  Tensor last_channel_weights;  // [B, C] of the last forward (detached)
  Tensor last_spatial_map;      // [B, H, W] of the last forward (detached)

 private:
  struct Weights {
    Tensor channel, spatial;  // [B, C, 1, 1] and [B, 1, H, W]
  };
  Weights weights(const Tensor& x);  // and keeps them as the last ones
};

}  // namespace qkv::nn
