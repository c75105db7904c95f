// batch_norm: one recorded op over the backend's batch_norm kernels, forward and backward. The
// forward saves the per-channel mean and 1 / sqrt(var + eps) it normalized with; the backward is
// the closed form (Backend::batch_norm_backward), so the graph holds one node, not the dozen
// broadcast ops the formula is built of.
#include "engine/autograd.h"
#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

namespace {

void check_per_channel(const Tensor& t, const Tensor& x, const char* what, bool same_dtype,
                       const char* name) {
  if (!t.defined()) return;
  QKV_CHECK(t.shape() == Shape{x.size(1)}, name, what, " has shape ", shape_str(t.shape()),
            ", expected [", x.size(1), "] (the channels of the input ", shape_str(x.shape()), ")");
  if (same_dtype) detail::check_same_dtype(x, t, name);
  detail::check_same_device(x, t, name);
}

// running = (1 - momentum) * running + momentum * batch, in the running statistic's dtype.
void fold_in(const Tensor& running, const Tensor& batch, double momentum) {
  if (running.defined())
    copy_(running, add(mul(running, 1 - momentum), mul(batch.to(running.dtype()), momentum)));
}

// batch_norm, or relu(batch_norm) with relu: one kernel each way, under the op's name.
Tensor normalize(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                 const Tensor& weight, const Tensor& bias, bool training, double momentum,
                 double eps, bool relu, const char* name) {
  detail::check_defined(x, name);
  detail::check_f32_or_f64(x, name);
  QKV_CHECK(x.dim() >= 2, name, "expected an input [N, C, ...], got ", shape_str(x.shape()));
  check_per_channel(weight, x, "weight", true, name);
  check_per_channel(bias, x, "bias", true, name);
  check_per_channel(running_mean, x, "running_mean", false, name);
  check_per_channel(running_var, x, "running_var", false, name);
  const int64_t channels = x.size(1), per_channel = channels ? x.numel() / channels : 0;
  Tensor mean = Tensor::empty({channels}, x.dtype(), x.device());
  Tensor var = Tensor::empty({channels}, x.dtype(), x.device());
  if (training) {
    QKV_CHECK(per_channel > 1, name,
              "training needs more than one value per channel, got an input ",
              shape_str(x.shape()));
  } else {
    QKV_CHECK(running_mean.defined() && running_var.defined(), name,
              "eval mode needs running_mean and running_var");
    NoGrad no_grad;
    copy_(mean, running_mean);
    copy_(var, running_var);
  }
  Tensor xc = detail::contiguous_data(x);
  Tensor wc = weight.defined() ? detail::contiguous_data(weight) : Tensor();
  Tensor bc = bias.defined() ? detail::contiguous_data(bias) : Tensor();
  Tensor rstd = Tensor::empty({channels}, x.dtype(), x.device());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  x.backend().batch_norm(xc, wc, bc, eps, training, mean, var, rstd, y, relu);
  // With relu the backward masks gy by the output, as relu_backward(gy, y) does; the output is
  // saved as data (no autograd edge), so the node does not keep itself alive.
  Tensor relu_output = relu ? y.detach() : Tensor();
  Tensor result = record(
      name, {x, weight, bias}, y,
      [xc, wc, bc, mean, rstd, training, relu_output](const Tensor& gy) {
        Tensor gx = Tensor::empty(xc.shape(), xc.dtype(), xc.device());
        Tensor gw = wc.defined() ? Tensor::empty(wc.shape(), wc.dtype(), wc.device()) : Tensor();
        Tensor gb = bc.defined() ? Tensor::empty(bc.shape(), bc.dtype(), bc.device()) : Tensor();
        xc.backend().batch_norm_backward(detail::contiguous_data(gy), xc, wc, bc, mean, rstd,
                                         training, relu_output, gx, gw, gb);
        return grads{gx, gw, gb};
      });
  // After record(): the profiler charges an op the time since the previous one finished, so the
  // kernel's time stays batch_norm's instead of going to the small ops of the update.
  if (training) {
    NoGrad no_grad;
    fold_in(running_mean, mean, momentum);
    fold_in(running_var, mul(var, double(per_channel) / double(per_channel - 1)), momentum);
  }
  return result;
}

}  // namespace

// The backward is the fused batch_norm_backward kernel.
QKV_RECORDED_OP("batch_norm", "engine", kernel);
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  return normalize(x, running_mean, running_var, weight, bias, training, momentum, eps, false,
                   "batch_norm");
}

// The same kernels with the ReLU applied as the output is stored and its mask applied to gy as the
// backward reads it: no separate relu pass either way.
QKV_RECORDED_OP("batch_norm_relu", "engine", kernel);
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps) {
  return normalize(x, running_mean, running_var, weight, bias, training, momentum, eps, true,
                   "batch_norm_relu");
}

}  // namespace qkv
