// Backend's default conv2d kernels: the convolution composed from im2col / col2im and matmul (a
// backend without a kernel of its own, CUDA, runs these; the CPU overrides both,
// engine/cpu/conv2d_kernels.cpp, except under autocast without a bfloat16 kernel). matmul is the
// engine op, so under autocast the products run in bfloat16 like every other product.
#include <algorithm>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"

namespace qkv {

namespace {

// x's columns as [N, groups, K, L].
Tensor columns(Backend& backend, const Tensor& x, const Window2d& w, int64_t groups) {
  const int64_t N = x.size(0), C = x.size(1), kk = w.kernel_h * w.kernel_w;
  const int64_t L = w.out_h(x.size(2)) * w.out_w(x.size(3));
  Tensor cols = Tensor::empty({N, C * kk, L}, x.dtype(), x.device());
  backend.im2col(x, w, cols, 0);
  return cols.reshape({N, groups, C / groups * kk, L});
}

// The weights [O, C / groups, kh, kw] as [1, groups, O / groups, K], broadcast over the images.
Tensor grouped_weight(const Tensor& weight, int64_t groups) {
  const int64_t O = weight.size(0);
  return weight.reshape({1, groups, O / groups, weight.numel() / O});
}

}  // namespace

Conv2dForward Backend::conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                      const Window2d& window, int64_t groups) {
  NoGrad no_grad;
  const int64_t N = x.size(0), O = weight.size(0);
  const int64_t Ho = window.out_h(x.size(2)), Wo = window.out_w(x.size(3));
  Tensor cols = columns(*this, x, window, groups);
  Tensor y = qkv::matmul(grouped_weight(weight, groups), cols).reshape({N, O, Ho, Wo});
  if (bias.defined()) y = add(y, bias.reshape({1, O, 1, 1}));
  return {y, cols};
}

void Backend::conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                              const Tensor& saved, const Window2d& window, int64_t groups,
                              const Tensor& gx, const Tensor& gweight, const Tensor& gbias,
                              bool accumulate_gx) {
  NoGrad no_grad;
  if (accumulate_gx && gx.defined()) {  // apart, then sum + gradient, as the sweep adds them
    const Tensor apart = Tensor::empty(gx.shape(), gx.dtype(), gx.device());
    conv2d_backward(gy, x, weight, saved, window, groups, apart, gweight, gbias);
    binary(BinaryOp::add, gx, apart, gx);
    return;
  }
  const int64_t N = x.size(0), O = weight.size(0);
  const Tensor wg = grouped_weight(weight, groups);
  const int64_t K = wg.size(3), L = gy.numel() / std::max<int64_t>(N * O, 1);
  Tensor gy4 = gy.reshape({N, groups, O / groups, L});
  if (gx.defined()) {
    Tensor gcols = qkv::matmul(transpose(wg, -1, -2), gy4);  // [N, groups, K, L], contiguous
    fill(gx, 0);
    col2im(gcols, window, gx);
  }
  if (gweight.defined()) {
    Tensor cols = saved.defined() ? saved : columns(*this, x, window, groups);
    copy_(gweight, sum(qkv::matmul(gy4, transpose(cols.reshape({N, groups, K, L}), -1, -2)), {0})
                       .reshape(weight.shape()));
  }
  if (gbias.defined()) copy_(gbias, sum(gy.reshape({N, O, L}), {0, 2}));
}

bool Backend::conv2d_adds_into_gx(const Tensor&, const Tensor&, const Window2d&, int64_t) const {
  return false;
}

}  // namespace qkv
