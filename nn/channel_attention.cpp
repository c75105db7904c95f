#include "nn/channel_attention.h"

#include <algorithm>

namespace qkv::nn {

namespace {
int64_t hidden(int64_t channels, int64_t reduction) {
  return std::max<int64_t>(1, channels / reduction);
}
}  // namespace

SEBlock::SEBlock(int64_t c, int64_t r) {
  fc1 = register_module("fc1", std::make_shared<Linear>(c, hidden(c, r)));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden(c, r), c));
}

Tensor SEBlock::forward(const Tensor& x) {
  Tensor w = sigmoid(fc2->forward(relu(fc1->forward(mean(x, {2, 3})))));  // [B, C]
  last_weights = w.detach();
  return mul(x, w.unsqueeze(2).unsqueeze(3));
}

ChannelAttention::ChannelAttention(int64_t c, int64_t r) {
  fc1 = register_module("fc1", std::make_shared<Linear>(c, hidden(c, r), false));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden(c, r), c, false));
}

Tensor ChannelAttention::weights(const Tensor& x) {
  // [B, C, 2] seen as [B, 2, C]: the shared MLP runs once over both poolings, its two results
  // then summed
  Tensor pooled = mean_amax(x, {2, 3}).transpose(1, 2);
  Tensor w = sigmoid(sum(fc2->forward(relu(fc1->forward(pooled))), {1}));
  return w.unsqueeze(2).unsqueeze(3);
}

SpatialAttention::SpatialAttention(int64_t k) {
  conv = register_module("conv", std::make_shared<Conv2d>(2, 1, k, 1, k / 2, 1, false));
}

Tensor SpatialAttention::weights(const Tensor& x) {
  return weights_of_maps(mean_amax(x, {1}));  // [B, 2, H, W]: the mean and the maximum over C
}

Tensor SpatialAttention::weights_of_maps(const Tensor& maps) {
  return sigmoid(conv->forward(maps));
}

CBAM::CBAM(int64_t c, int64_t r, int64_t k) {
  channel = register_module("channel", std::make_shared<ChannelAttention>(c, r));
  spatial = register_module("spatial", std::make_shared<SpatialAttention>(k));
}

// y = x * cw, then y * sw with sw the spatial attention's weights of y, computed without y: the
// pool over the channels takes y's values from x and cw as it goes (mean_amax_scaled), and so
// does the output (mul3), two full-size passes fewer forward and three backward
// (docs/CPU_KERNELS.md). The output is the three ops' bits; the gradients agree to rounding: y's
// two gradients are each multiplied by cw and then added, where the ops add them first.
Tensor CBAM::forward(const Tensor& x) {
  const Weights w = weights(x);
  return mul3(x, w.channel, w.spatial);
}

// relu(residual + forward(x)) in one pass: the output's product and the residual's add_relu
// without the product written out (mul3_add_relu), the same bits.
Tensor CBAM::forward_add_relu(const Tensor& x, const Tensor& residual) {
  const Weights w = weights(x);
  return mul3_add_relu(residual, x, w.channel, w.spatial);
}

CBAM::Weights CBAM::weights(const Tensor& x) {
  Tensor cw = channel->weights(x);
  Tensor sw = spatial->weights_of_maps(mean_amax_scaled(x, cw));
  last_channel_weights = cw.detach().flatten(1);
  last_spatial_map = sw.detach().squeeze(1);
  return {cw, sw};
}

}  // namespace qkv::nn
