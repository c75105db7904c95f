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
  auto mlp = [&](const Tensor& d) { return fc2->forward(relu(fc1->forward(d))); };
  Tensor w = sigmoid(add(mlp(mean(x, {2, 3})), mlp(amax(x, {2, 3}))));
  return w.unsqueeze(2).unsqueeze(3);
}

SpatialAttention::SpatialAttention(int64_t k) {
  conv = register_module("conv", std::make_shared<Conv2d>(2, 1, k, 1, k / 2, 1, false));
}

Tensor SpatialAttention::weights(const Tensor& x) {
  Tensor maps = cat({mean(x, {1}, true), amax(x, {1}, true)}, 1);  // [B, 2, H, W]
  return sigmoid(conv->forward(maps));
}

CBAM::CBAM(int64_t c, int64_t r, int64_t k) {
  channel = register_module("channel", std::make_shared<ChannelAttention>(c, r));
  spatial = register_module("spatial", std::make_shared<SpatialAttention>(k));
}

Tensor CBAM::forward(const Tensor& x) {
  Tensor cw = channel->weights(x);
  Tensor y = mul(x, cw);
  Tensor sw = spatial->weights(y);
  last_channel_weights = cw.detach().flatten(1);
  last_spatial_map = sw.detach().squeeze(1);
  return mul(y, sw);
}

}  // namespace qkv::nn
