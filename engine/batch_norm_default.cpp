// Backend's default batch_norm kernels: the formula composed from ops (reductions over N and the
// trailing dims, broadcast by [1, C, 1] operands). A backend without a fused kernel (CUDA) runs
// these; the CPU backend overrides both (engine/cpu/batch_norm_kernels.cpp).
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"

namespace qkv {

namespace {

// x [N, C, ...] viewed as [N, C, S].
Shape as_three_dims(const Tensor& x) {
  int64_t s = 1;
  for (int d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}

Tensor per_channel(const Tensor& t) { return t.reshape({1, t.numel(), 1}); }

}  // namespace

void Backend::batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                         bool training, const Tensor& mean, const Tensor& var, const Tensor& rstd,
                         const Tensor& out, bool relu) {
  NoGrad no_grad;
  Tensor x3 = x.reshape(as_three_dims(x));
  if (training) {
    Tensor mu = qkv::mean(x3, {0, 2});
    copy_(mean, mu);
    copy_(var, qkv::mean(square(sub(x3, per_channel(mu))), {0, 2}));
  }
  copy_(rstd, qkv::rsqrt(qkv::add(var, eps)));
  Tensor y = mul(sub(x3, per_channel(mean)), per_channel(rstd));
  if (weight.defined()) y = mul(y, per_channel(weight));
  if (bias.defined()) y = qkv::add(y, per_channel(bias));
  if (relu) y = qkv::relu(y);
  copy_(out, y.reshape(out.shape()));
}

void Backend::batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                  const Tensor& /*bias: the mask is read from relu_output*/,
                                  const Tensor& mean, const Tensor& rstd, bool training,
                                  const Tensor& relu_output, const Tensor& gx,
                                  const Tensor& gweight, const Tensor& gbias) {
  NoGrad no_grad;
  const Shape three = as_three_dims(x);
  Tensor g3 = (relu_output.defined() ? relu_backward(gy, relu_output) : gy).reshape(three);
  Tensor xhat = mul(sub(x.reshape(three), per_channel(mean)), per_channel(rstd));
  if (gweight.defined()) copy_(gweight, sum(mul(g3, xhat), {0, 2}));
  if (gbias.defined()) copy_(gbias, sum(g3, {0, 2}));
  if (!gx.defined()) return;
  Tensor d = g3;
  if (training)
    d = sub(sub(g3, qkv::mean(g3, {0, 2}, true)),
            mul(xhat, qkv::mean(mul(g3, xhat), {0, 2}, true)));
  Tensor scale = weight.defined() ? mul(rstd, weight) : rstd;
  copy_(gx, mul(d, per_channel(scale)).reshape(gx.shape()));
}

}  // namespace qkv
