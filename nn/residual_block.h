// The basic residual block of ResNet (He et al.), with an optional attention module (SE or CBAM)
// on the main branch just before the identity add, where both papers place it:
//
//   x -> conv3x3 -> BN -> ReLU -> conv3x3 -> BN -> [SE | CBAM] -> (+ shortcut(x)) -> ReLU
//
// The shortcut is the identity, or a strided 1x1 conv + BN when the shape changes.
#pragma once

#include "nn/batch_norm.h"
#include "nn/channel_attention.h"
#include "nn/conv.h"

namespace qkv::nn {

class ResidualBlock : public Layer {
 public:
  // attention: "none", "se" or "cbam".
  ResidualBlock(int64_t in_channels, int64_t out_channels, int64_t stride = 1,
                const std::string& attention = "none", int64_t reduction = 4);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "ResidualBlock(" + attention_kind + ")"; }

  std::string attention_kind;
  std::shared_ptr<Conv2d> conv1, conv2, shortcut_conv;
  std::shared_ptr<BatchNorm2d> bn1, bn2, shortcut_bn;
  std::shared_ptr<SEBlock> se;
  std::shared_ptr<CBAM> cbam;
};

}  // namespace qkv::nn
