// Convolution and pooling over [N, C, H, W], each one recorded op.
//
// conv2d runs on the backend's conv2d kernels (Backend::conv2d_forward / conv2d_backward): the
// default composes them from im2col, one batched matmul of the weights [g, O/g, K] by the columns
// [N, g, K, L] and col2im (engine/conv2d_default.cpp); the CPU runs them image by image on
// columns that stay in its L2 cache (engine/cpu/conv2d_kernels.cpp). Either way
//   y = W @ cols + b,   gW = sum_n gy[n] @ cols[n]^T,   gcols = W^T @ gy,   gx = col2im(gcols).
//
// Pooling reads the windows through im2col: cols viewed as [N*C, kh*kw, L] and reduced over the
// middle dim.
#include <limits>
#include <tuple>

#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"
#include "engine/profiler.h"

namespace qkv {

namespace {

Window2d square_window(int64_t k, int64_t stride, int64_t padding) {
  return {.kernel_h = k,
          .kernel_w = k,
          .stride_h = stride,
          .stride_w = stride,
          .pad_h = padding,
          .pad_w = padding};
}

// Checks x is [N, C, H, W] and the window fits; returns (Ho, Wo).
std::pair<int64_t, int64_t> output_size(const Tensor& x, const Window2d& w, const char* op) {
  detail::check_defined(x, op);
  detail::check_f32_or_f64(x, op);
  QKV_CHECK(x.dim() == 4, op, "expected input [N, C, H, W], got ", shape_str(x.shape()));
  QKV_CHECK(w.kernel_h > 0 && w.kernel_w > 0 && w.stride_h > 0 && w.stride_w > 0 && w.pad_h >= 0 &&
                w.pad_w >= 0,
            op, "kernel and stride must be positive and padding non-negative");
  const int64_t Ho = w.out_h(x.size(2)), Wo = w.out_w(x.size(3));
  QKV_CHECK(Ho > 0 && Wo > 0, op, "kernel ", w.kernel_h, "x", w.kernel_w, " with padding ", w.pad_h,
            " does not fit input ", shape_str(x.shape()));
  return {Ho, Wo};
}

// A pooling op's square window (stride -1: the kernel size) and its output size [Ho, Wo].
// A window must see at least one real input, or max's would be the padding's -inf and avg's
// mostly zeros (PyTorch's limit too).
std::tuple<Window2d, int64_t, int64_t> pool_window(const Tensor& x, int64_t kernel_size,
                                                   int64_t stride, int64_t padding,
                                                   const char* op) {
  const Window2d w = square_window(kernel_size, stride < 0 ? kernel_size : stride, padding);
  const auto [Ho, Wo] = output_size(x, w, op);
  QKV_CHECK(padding * 2 <= kernel_size, op, "padding ", padding, " exceeds half the kernel ",
            kernel_size);
  return {w, Ho, Wo};
}

// im2col of a contiguous x into a new [N, C*kh*kw, Ho*Wo] tensor.
Tensor im2col(const Tensor& xc, const Window2d& w, int64_t L, double pad_value = 0) {
  const int64_t N = xc.size(0), C = xc.size(1);
  Tensor cols = detail::empty({N, C * w.kernel_h * w.kernel_w, L}, xc.dtype(), xc.device());
  xc.backend().im2col(xc, w, cols, pad_value);
  return cols;
}

// The input gradient from the gradient of cols (any layout reshapeable to cols').
Tensor col2im(const Tensor& gcols, const Window2d& w, const Shape& x_shape) {
  Tensor gx = zeros(x_shape, {gcols.dtype(), gcols.device()});
  gcols.backend().col2im(detail::contiguous_data(gcols), w, gx);
  return gx;
}

}  // namespace

// The backward is the backend's conv2d_backward kernel.
QKV_RECORDED_OP("conv2d", "engine", kernel);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t groups) {
  const char* op = "conv2d";
  detail::check_defined(weight, op, "weight");
  QKV_CHECK(weight.dim() == 4, op, "expected weight [O, C/groups, kh, kw], got ",
            shape_str(weight.shape()));
  const Window2d w{.kernel_h = weight.size(2),
                   .kernel_w = weight.size(3),
                   .stride_h = stride,
                   .stride_w = stride,
                   .pad_h = padding,
                   .pad_w = padding};
  output_size(x, w, op);
  const int64_t C = x.size(1), O = weight.size(0), g = groups;
  QKV_CHECK(g > 0 && C % g == 0 && O % g == 0 && weight.size(1) == C / g, op, "input channels ", C,
            ", weight ", shape_str(weight.shape()), " and groups ", g, " do not agree");
  detail::check_same_dtype(x, weight, op);
  detail::check_same_device(x, weight, op);
  if (bias.defined()) {
    QKV_CHECK(bias.dim() == 1 && bias.size(0) == O, op, "bias has shape ", shape_str(bias.shape()),
              ", expected [", O, "]");
    detail::check_same_dtype(x, bias, op);
    detail::check_same_device(x, bias, op);
  }
  // The backend's kernels compute values only; record() adds the one node, and the profiler one
  // conv2d event with the product's FLOPs (the default's matmul and add are its internals).
  const Tensor xc = detail::contiguous_data(x), wc = detail::contiguous_data(weight);
  const Tensor bc = bias.defined() ? detail::contiguous_data(bias) : Tensor();
  Conv2dForward forward;
  {
    const profile_hooks::OpInternalsScope internals;
    forward = x.backend().conv2d_forward(xc, wc, bc, w, g);
  }
  return record(op, {x, weight, bias}, forward.y,
                [xc, wc, saved = forward.saved, w, g, x_wanted = x.requires_grad(),
                 w_wanted = weight.requires_grad(),
                 b_wanted = bias.defined() && bias.requires_grad()](const Tensor& gy) {
                  auto like = [](const Tensor& t, bool wanted) {
                    return wanted ? Tensor::empty(t.shape(), t.dtype(), t.device()) : Tensor();
                  };
                  // x's gradient into the sum of its other gradients where the sweep offers one and
                  // the backend adds into it in place (a 1x1 shortcut at stride 2 beside its
                  // block's first convolution), else a new tensor
                  const Tensor sum = x_wanted && xc.backend().conv2d_adds_into_gx(xc, wc, w, g)
                                         ? detail::offered_gradient_sum(0, xc)
                                         : Tensor();
                  Tensor gx = sum.defined() ? sum : like(xc, x_wanted), gw = like(wc, w_wanted);
                  Tensor gb =
                      b_wanted ? Tensor::empty({wc.size(0)}, wc.dtype(), wc.device()) : Tensor();
                  xc.backend().conv2d_backward(detail::contiguous_data(gy), xc, wc, saved, w, g, gx,
                                               gw, gb, sum.defined());
                  return grads{gx, gw, gb};
                });
}

QKV_RECORDED_OP("max_pool2d", "engine", kernel);
Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding) {
  const char* op = "max_pool2d";
  const auto [w, Ho, Wo] = pool_window(x, kernel_size, stride, padding, op);
  const int64_t N = x.size(0), C = x.size(1), L = Ho * Wo, kk = kernel_size * kernel_size;
  Tensor cols = im2col(detail::contiguous_data(x), w, L, -std::numeric_limits<double>::infinity());
  Tensor windows = cols.reshape({N * C, kk, L});
  Tensor y = detail::empty({N, C, Ho, Wo}, x.dtype(), x.device());
  Tensor where_max = detail::empty({N * C, 1, L}, DType::i64, x.device());
  x.backend().reduce(ReduceOp::max, windows, y);
  x.backend().reduce(ReduceOp::argmax, windows, where_max);
  // The gradient goes to the first maximum of each window (PyTorch's choice), through col2im.
  return record(op, {x}, y, [where_max, w, x_shape = x.shape(), kk](const Tensor& gy) {
    const int64_t rows = where_max.size(0), L = where_max.size(2);
    Tensor gcols = zeros({rows, kk, L}, {gy.dtype(), gy.device()});
    gy.backend().scatter_add(gcols, 1, where_max,
                             detail::contiguous_data(reshape(gy, {rows, 1, L})));
    return grads{col2im(gcols, w, x_shape)};
  });
}

QKV_RECORDED_OP("avg_pool2d", "engine", kernel);
Tensor avg_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding) {
  const char* op = "avg_pool2d";
  const auto [w, Ho, Wo] = pool_window(x, kernel_size, stride, padding, op);
  const int64_t N = x.size(0), C = x.size(1), L = Ho * Wo, kk = kernel_size * kernel_size;
  // Zero padding counted in the mean: PyTorch's count_include_pad=True.
  Tensor cols = im2col(detail::contiguous_data(x), w, L);
  Tensor total = detail::empty({N, C, Ho, Wo}, x.dtype(), x.device());
  x.backend().reduce(ReduceOp::sum, cols.reshape({N * C, kk, L}), total);
  Tensor y = mul(total, 1.0 / double(kk));
  return record(op, {x}, y, [w, x_shape = x.shape(), kk](const Tensor& gy) {
    const int64_t rows = x_shape[0] * x_shape[1], L = gy.numel() / std::max<int64_t>(rows, 1);
    // every tap of a window receives gy / kk
    Tensor share = mul(reshape(gy, {rows, 1, L}), 1.0 / double(kk));
    return grads{col2im(expand(share, {rows, kk, L}), w, x_shape)};
  });
}

}  // namespace qkv
