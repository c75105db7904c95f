// 2-D convolution: the Conv2d layer over the engine's conv2d op (engine/ops/conv_ops.cpp: im2col
// + one batched GEMM forward, two GEMMs + col2im backward).
//
// unfold2d / pad2d build the same windows from differentiable views instead ([B, C, kh, kw, Ho,
// Wo]); they are kept as a readable reference for what im2col computes.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

// Pads the last two dims of x with `value` (zeros for conv, -inf for max pooling).
Tensor pad2d(const Tensor& x, int64_t pad_h, int64_t pad_w, double value = 0.0);
// x [B, C, H, W] (already padded) -> windows [B, C, kh, kw, Ho, Wo].
Tensor unfold2d(const Tensor& x, int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w);

// torch.nn.functional.conv2d is the engine's op (declared in engine/ops.h); the using-declaration
// makes nn::conv2d the same function, so unqualified calls are never ambiguous.
using qkv::conv2d;

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
