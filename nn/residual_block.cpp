#include "nn/residual_block.h"

#include "engine/check_name.h"
#include "engine/error.h"
#include "nn/residual_block_names.h"

namespace qkv::nn {

const std::vector<std::string>& block_attention_names() {
  static const std::vector<std::string> names = {"none", "se", "cbam"};
  return names;
}

ResidualBlock::ResidualBlock(int64_t in, int64_t out, int64_t stride, const std::string& attention,
                             int64_t reduction)
    : attention_kind(attention) {
  check_name_among(attention, block_attention_names(), "ResidualBlock", "attention");
  // Convolutions before a BatchNorm need no bias: the norm's shift replaces it.
  conv1 = register_module("conv1", std::make_shared<Conv2d>(in, out, 3, stride, 1, 1, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(out));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(out, out, 3, 1, 1, 1, false));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(out));
  if (attention == "se") se = register_module("se", std::make_shared<SEBlock>(out, reduction));
  if (attention == "cbam") cbam = register_module("cbam", std::make_shared<CBAM>(out, reduction));
  if (stride != 1 || in != out) {
    shortcut_conv =
        register_module("shortcut_conv", std::make_shared<Conv2d>(in, out, 1, stride, 0, 1, false));
    shortcut_bn = register_module("shortcut_bn", std::make_shared<BatchNorm2d>(out));
  }
}

Tensor ResidualBlock::forward(const Tensor& x) {
  Tensor y = bn2->forward(conv2->forward(bn1->forward_relu(conv1->forward(x))));
  if (se) y = se->forward(y);
  Tensor identity = shortcut_conv ? shortcut_bn->forward(shortcut_conv->forward(x)) : x;
  // The identity first: the backward sweep then runs the main branch's rules before the
  // shortcut's (autograd.cpp's topo_order follows a node's inputs in order), so x's gradient sum
  // already holds conv1's gradient when the 1x1 shortcut's rule runs, and that rule adds its own
  // in place (a quarter of the positions at stride 2) where a whole gradient, mostly zero, was
  // written and then added. a + b is b + a: the same values either way. After CBAM the add and
  // ReLU are CBAM's output pass (forward_add_relu): the same bits as add_relu(identity,
  // cbam->forward(y)), its output never written.
  if (cbam) return cbam->forward_add_relu(y, identity);
  return add_relu(identity, y);
}

}  // namespace qkv::nn
