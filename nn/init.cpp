#include "nn/init.h"

#include <cmath>

#include "engine/error.h"
#include "engine/ops.h"

namespace qkv::nn::init {

Fans fans(const Tensor& w) {
  QKV_CHECK(w.dim() >= 2, "init", "fans need a weight of at least 2 dims, got ",
            shape_str(w.shape()));
  int64_t receptive = 1;
  for (int d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

// Fills are drawn on the parameter's device in its dtype, then copied in without a graph.
void uniform_(const Tensor& t, double low, double high, Generator* gen) {
  NoGrad no_grad;
  copy_(t, uniform(t.shape(), low, high, {t.dtype(), t.device()}, gen));
}

void normal_(const Tensor& t, double mean, double std, Generator* gen) {
  NoGrad no_grad;
  copy_(t, add(mul(randn(t.shape(), {t.dtype(), t.device()}, gen), std), mean));
}

void zeros_(const Tensor& t) {
  NoGrad no_grad;
  fill_(t, 0);
}

void ones_(const Tensor& t) {
  NoGrad no_grad;
  fill_(t, 1);
}

void xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  Fans f = fans(t);
  double a = gain * std::sqrt(6.0 / double(f.fan_in + f.fan_out));
  uniform_(t, -a, a, gen);
}

void xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  Fans f = fans(t);
  normal_(t, 0, gain * std::sqrt(2.0 / double(f.fan_in + f.fan_out)), gen);
}

void kaiming_uniform_(const Tensor& t, double a, Generator* gen) {
  double gain = std::sqrt(2.0 / (1 + a * a));
  double bound = gain * std::sqrt(3.0 / double(fans(t).fan_in));
  uniform_(t, -bound, bound, gen);
}

void kaiming_normal_(const Tensor& t, double a, Generator* gen) {
  double gain = std::sqrt(2.0 / (1 + a * a));
  normal_(t, 0, gain / std::sqrt(double(fans(t).fan_in)), gen);
}

}  // namespace qkv::nn::init
