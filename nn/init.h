// Parameter initializers, in place, drawing from a qkv Generator (the default one unless given).
//
// Fans follow PyTorch: for a weight [out, in, k...], fan_in = in * prod(k), fan_out = out *
// prod(k). Modules call these so that a fresh qkv layer has the same distribution as PyTorch's.
#pragma once

#include "engine/random.h"
#include "engine/tensor.h"

namespace qkv::nn::init {

struct Fans {
  int64_t fan_in, fan_out;
};
Fans fans(const Tensor& weight);

void uniform_(const Tensor& t, double low, double high, Generator* gen = nullptr);
void normal_(const Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);
// U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(const Tensor& t, double gain = 1, Generator* gen = nullptr);
// N(0, std) with std = gain * sqrt(2 / (fan_in + fan_out)).
void xavier_normal_(const Tensor& t, double gain = 1, Generator* gen = nullptr);
// Leaky-ReLU gain sqrt(2 / (1 + a^2)) over sqrt(fan_in): U(-b, b) with b = gain * sqrt(3 / fan_in).
void kaiming_uniform_(const Tensor& t, double a = 0, Generator* gen = nullptr);
void kaiming_normal_(const Tensor& t, double a = 0, Generator* gen = nullptr);

}  // namespace qkv::nn::init
