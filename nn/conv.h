// 2-D convolution as im2col + one batched matmul, built only from differentiable engine ops, so
// its backward comes from theirs (no new op, nothing new to trust).
//
// unfold2d stacks one strided view of the input per kernel offset, giving [B, C, kh, kw, Ho, Wo];
// a convolution is then a matmul of the weights against those windows,
// and pooling is a reduction over the window dims.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

// Pads the last two dims of x with `value` (zeros for conv, -inf for max pooling).
Tensor pad2d(const Tensor& x, int64_t pad_h, int64_t pad_w, double value = 0.0);
// x [B, C, H, W] (already padded) -> windows [B, C, kh, kw, Ho, Wo].
Tensor unfold2d(const Tensor& x, int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w);

// torch.nn.functional.conv2d: x [B, C, H, W], weight [O, C / groups, kh, kw], bias [O] or
// undefined -> [B, O, Ho, Wo].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              int64_t stride = 1, int64_t padding = 0, int64_t groups = 1);

class Conv2d : public Layer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  int64_t in_channels, out_channels, kernel_size, stride, padding, groups;
  Tensor weight, bias;
};

}  // namespace qkv::nn
