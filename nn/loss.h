// Losses, PyTorch's names and argument orders. cross_entropy and nll_loss are the engine's.
#pragma once

#include "engine/ops.h"

namespace qkv::nn {

using qkv::cross_entropy;
using qkv::nll_loss;
using qkv::Reduction;

// mean((input - target)^2) (or sum / none).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Binary cross-entropy on logits, in the stable form max(x, 0) - x y + log(1 + exp(-|x|)),
// which never takes the log of a sigmoid that rounded to 0 or 1.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean);

}  // namespace qkv::nn
