// Pooling over [B, C, H, W]: max and average windows, adaptive average, global average.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

// max_pool2d and avg_pool2d are the engine's ops (engine/ops.h: -inf padding for max, zeros
// counted in the mean for average; stride < 0 means stride = kernel_size).
using qkv::avg_pool2d;
using qkv::max_pool2d;
// Output cell (i, j) averages rows [floor(i H / oh), ceil((i + 1) H / oh)) and likewise columns.
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = -1, int64_t padding = 0)
      : kernel_size(kernel_size), stride(stride), padding(padding) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_size, stride, padding); }
  std::string describe() const override { return "MaxPool2d"; }
  int64_t kernel_size, stride, padding;
};

class AvgPool2d : public Layer {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = -1, int64_t padding = 0)
      : kernel_size(kernel_size), stride(stride), padding(padding) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_size, stride, padding); }
  std::string describe() const override { return "AvgPool2d"; }
  int64_t kernel_size, stride, padding;
};

class AdaptiveAvgPool2d : public Layer {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : out_h(out_h), out_w(out_w) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, out_h, out_w); }
  std::string describe() const override { return "AdaptiveAvgPool2d"; }
  int64_t out_h, out_w;
};

// [B, C, H, W] -> [B, C]: the mean of each channel.
class GlobalAvgPool : public Layer {
 public:
  Tensor forward(const Tensor& x) override { return mean(x, {2, 3}); }
  std::string describe() const override { return "GlobalAvgPool"; }
};

}  // namespace qkv::nn
