// Backend's default gradient kernels for reductions, and mean_amax's forward, composed from ops or
// from the backend's own reduce: what a backend without its own kernels (CUDA) runs. The CPU's
// are one pass each (engine/cpu/reduction_gradients.cpp, and reduce_kernels.cpp for mean_amax;
// cbam_kernels.cpp for CBAM's mean_amax_scaled and mul3).
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

void Backend::extreme_backward(const Tensor& x, const Tensor& kept, const Tensor& gy,
                               const Tensor& gx) {
  NoGrad no_grad;
  const Shape keep = {x.size(0), 1, x.size(2)};
  copy_(gx, detail::extreme_gradient(x, kept.reshape(keep), gy.reshape(keep), {1}));
}

void Backend::mean_amax(const Tensor& x, const Tensor& out) {
  const int64_t outer = x.size(0), inner = x.size(2);
  Tensor sums = Tensor::empty({outer, inner}, x.dtype(), x.device());
  Tensor mean = Tensor::empty({outer, inner}, x.dtype(), x.device());
  reduce(ReduceOp::sum, x, sums);
  unary(UnaryOp::mul_scalar, sums, mean, 1.0 / double(x.size(1)));
  Tensor max = Tensor::empty({outer, inner}, x.dtype(), x.device());
  reduce(ReduceOp::max, x, max);
  copy(mean, select(out, 1, 0));
  copy(max, select(out, 1, 1));
}

void Backend::mean_amax_backward(const Tensor& x, const Tensor& out, const Tensor& gy,
                                 const Tensor& gx, bool accumulate) {
  NoGrad no_grad;
  const Tensor g = detail::mean_amax_gradient(x, out, gy, {1});
  if (accumulate)
    binary(BinaryOp::add, gx, g, gx);
  else
    copy_(gx, g);
}

void Backend::product_sum(const Tensor& a, const Tensor& b, const Tensor& out) {
  NoGrad no_grad;
  copy_(out, sum(mul(a, b), {1}));
}

namespace {
// A contiguous factor per position, [outer, inner], seen as x's [outer, reduced, inner] (stride 0
// along the middle axis).
Tensor along_middle(const Tensor& factor, const Tensor& x) {
  return make_view(factor, x.shape(), {x.size(2), 0, 1}, factor.offset());
}
// A factor per run, scale [outer, reduced], seen as x's [outer, reduced, inner] (stride 0 along
// inner).
Tensor along_inner(const Tensor& scale, const Tensor& x) {
  return make_view(scale, x.shape(), {x.size(1), 1, 0}, scale.offset());
}
}  // namespace

void Backend::mul_gradients(const Tensor& gy, const Tensor& full, const Tensor& factor,
                            const Tensor& g_full, const Tensor& g_factor) {
  binary(BinaryOp::mul, gy, along_middle(factor, gy), g_full);
  product_sum(gy, full, g_factor);
}

namespace {
// Contiguous [outer, reduced, inner] seen as [outer * reduced, inner, 1], and a factor per run as
// [outer * reduced, 1]: how mul's rule hands a [N, C, 1, 1] factor's product to mul_gradients
// (the broadcast dims H, W the middle axis).
Tensor runs_as_middle_axis(const Tensor& t) {
  return make_view(t, {t.size(0) * t.size(1), t.size(2), 1}, {t.size(2), 1, 1}, t.offset());
}
Tensor factor_per_run(const Tensor& scale) {
  return make_view(scale, {scale.numel(), 1}, {1, 1}, scale.offset());
}
}  // namespace

// mean_amax(mul(x, scale)) as the ops run it: the product written, then mean_amax.
void Backend::mean_amax_scaled(const Tensor& x, const Tensor& scale, const Tensor& out) {
  Tensor product = Tensor::empty(x.shape(), x.dtype(), x.device());
  binary(BinaryOp::mul, x, along_inner(scale, x), product);
  mean_amax(product, out);
}

// The sweep's order: mean_amax's rule gives gz, then mul's rule its factors' gradients (both at
// once, mul_gradients), then the sum offered takes gx with add.
void Backend::mean_amax_scaled_backward(const Tensor& x, const Tensor& scale, const Tensor& out,
                                        const Tensor& gy, const Tensor& gx, const Tensor& g_scale,
                                        bool accumulate) {
  Tensor product = Tensor::empty(x.shape(), x.dtype(), x.device());
  binary(BinaryOp::mul, x, along_inner(scale, x), product);
  Tensor gz = Tensor::empty(x.shape(), x.dtype(), x.device());
  mean_amax_backward(product, out, gy, gz);
  Tensor g = accumulate ? Tensor::empty(x.shape(), x.dtype(), x.device()) : gx;
  mul_gradients(runs_as_middle_axis(gz), runs_as_middle_axis(x), factor_per_run(scale),
                runs_as_middle_axis(g), factor_per_run(g_scale));
  if (accumulate) binary(BinaryOp::add, gx, g, gx);
}

void Backend::mul3(const Tensor& x, const Tensor& scale, const Tensor& spatial, const Tensor& out) {
  Tensor product = Tensor::empty(x.shape(), x.dtype(), x.device());
  binary(BinaryOp::mul, x, along_inner(scale, x), product);
  binary(BinaryOp::mul, product, along_middle(spatial, x), out);
}

void Backend::mul3_add_relu(const Tensor& residual, const Tensor& x, const Tensor& scale,
                            const Tensor& spatial, const Tensor& out) {
  Tensor product = Tensor::empty(x.shape(), x.dtype(), x.device());
  mul3(x, scale, spatial, product);
  binary(BinaryOp::add_relu, residual, product, out);
}

// The two muls' rules in the sweep's order: the outer one's (gy * spatial and spatial's sum),
// then the inner one's at its gradient g1.
void Backend::mul3_backward(const Tensor& gy, const Tensor& x, const Tensor& scale,
                            const Tensor& spatial, const Tensor& gx, const Tensor& g_scale,
                            const Tensor& g_spatial) {
  Tensor product = Tensor::empty(x.shape(), x.dtype(), x.device());
  binary(BinaryOp::mul, x, along_inner(scale, x), product);
  Tensor g1 = Tensor::empty(x.shape(), x.dtype(), x.device());
  mul_gradients(gy, product, spatial, g1, g_spatial);
  mul_gradients(runs_as_middle_axis(g1), runs_as_middle_axis(x), factor_per_run(scale),
                runs_as_middle_axis(gx), factor_per_run(g_scale));
}

}  // namespace qkv
