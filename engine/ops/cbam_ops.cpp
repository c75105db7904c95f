// CBAM's spatial pool and output with the channel weights folded in: mean_amax_scaled(x, cw) is
// mean_amax(mul(x, cw), {1}) and mul3(x, cw, sw) is mul(mul(x, cw), sw), each without the
// product x * cw written out (engine/cpu/cbam_kernels.cpp says what that saves). Their values and
// gradients are the composed ops' bits; with create_graph their backward is the composed formula,
// which can be differentiated again.
#include "engine/autograd.h"
#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

namespace {

// x [N, C, ...] as the [N, C, rest] block the kernels walk.
Split3 channel_block(const Tensor& x) {
  const int64_t runs = x.size(0) * x.size(1);
  return {x.size(0), x.size(1), runs == 0 ? 0 : x.numel() / runs};
}

// x's shape with every dim after `keep` dims 1: [N, C, 1, 1] (a factor per channel) for keep 2.
Shape ones_after(const Tensor& x, int keep) {
  Shape s(x.shape().begin(), x.shape().end());
  for (size_t d = size_t(keep); d < s.size(); ++d) s[d] = 1;
  return s;
}

// The checks both ops share: x [N, C, ...] float32 or float64, and `scale` [N, C, 1, ...] with
// its dtype and device.
void check_channel_factor(const Tensor& x, const Tensor& scale, const char* op) {
  detail::check_defined(x, op);
  detail::check_defined(scale, op, "scale");
  detail::check_f32_or_f64(x, op);
  detail::check_same_dtype(x, scale, op);
  detail::check_same_device(x, scale, op);
  QKV_CHECK(x.dim() >= 2, op, "x must be [N, C, ...], got ", shape_str(x.shape()));
  QKV_CHECK(scale.shape() == ones_after(x, 2), op, "scale must be ", shape_str(ones_after(x, 2)),
            " (a factor per channel of x ", shape_str(x.shape()), "), got ",
            shape_str(scale.shape()));
}

// A contiguous tensor of `rows` x `columns` values seen as that 2-D matrix: a factor per channel
// as [N, C] (a factor per position is the block's reduced view, [N, H * W]).
Tensor as_matrix(const Tensor& t, int64_t rows, int64_t columns) {
  return make_view(t, {rows, columns}, {columns, 1}, t.offset());
}

}  // namespace

QKV_RECORDED_OP("mean_amax_scaled", "engine", composed);
Tensor mean_amax_scaled(const Tensor& x, const Tensor& scale) {
  const char* name = "mean_amax_scaled";
  check_channel_factor(x, scale, name);
  QKV_CHECK(x.size(1) > 0, name, "cannot reduce over an empty dimension (shape ",
            shape_str(x.shape()), ")");
  Shape shape = x.shape();
  shape[1] = 2;  // [N, 2, ...]: the mean, then the maximum
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  const Split3 block = channel_block(x), pairs{block.outer, 2, block.inner};
  const Tensor xc = detail::contiguous_data(x), sc = detail::contiguous_data(scale);
  if (out.numel() > 0)
    x.backend().mean_amax_scaled(detail::block_view(xc, block),
                                 as_matrix(sc, block.outer, block.mid),
                                 detail::block_view(out, pairs));
  const Tensor kept = out.detach();  // no cycle through the node
  return record(name, {x, scale}, out, [x, scale, xc, sc, kept, block, pairs](const Tensor& gy) {
    if (grad_enabled()) {  // mean_amax's rule at the product, then mul's
      const Tensor gz = detail::mean_amax_gradient(mul(x.detach(), scale.detach()), kept, gy, {1});
      return grads{mul(gz, scale), sum_to(mul(gz, x), scale.shape())};
    }
    // gx into the sum of x's other gradients where the sweep offers it (CBAM's x also feeds the
    // output's product, whose rule runs first), else a new tensor
    const Tensor sum = detail::offered_gradient_sum(0, xc);
    const bool into_sum = sum.defined();
    Tensor gx = into_sum ? sum : Tensor::empty(xc.shape(), xc.dtype(), xc.device());
    Tensor g_scale = Tensor::empty(sc.shape(), sc.dtype(), sc.device());
    if (gx.numel() > 0)
      xc.backend().mean_amax_scaled_backward(
          detail::block_view(xc, block), as_matrix(sc, block.outer, block.mid),
          detail::block_view(kept, pairs), detail::block_view(detail::contiguous_data(gy), pairs),
          detail::block_view(gx, block), as_matrix(g_scale, block.outer, block.mid), into_sum);
    else
      g_scale = zeros(sc.shape(), {.dtype = sc.dtype(), .device = sc.device()});
    return grads{gx, g_scale};
  });
}

namespace {

// mul3's checks: x and scale as check_channel_factor has them, spatial [N, 1, ...] with x's dtype
// and device.
void check_mul3_operands(const Tensor& x, const Tensor& scale, const Tensor& spatial,
                         const char* name) {
  check_channel_factor(x, scale, name);
  detail::check_defined(spatial, name, "spatial");
  detail::check_same_dtype(x, spatial, name);
  detail::check_same_device(x, spatial, name);
  Shape spatial_shape = x.shape();
  spatial_shape[1] = 1;
  QKV_CHECK(spatial.shape() == spatial_shape, name, "spatial must be ", shape_str(spatial_shape),
            " (a factor per position of x ", shape_str(x.shape()), "), got ",
            shape_str(spatial.shape()));
}

// mul3's gradients of x, scale and spatial for gy: the two muls' rules (composed where a graph
// is wanted), else the one-pass kernel.
grads mul3_gradients(const Tensor& gy, const Tensor& x, const Tensor& scale,
                     const Tensor& spatial) {
  if (grad_enabled()) {  // the two muls' rules, the outer one first
    const Tensor g1 = mul(gy, spatial);
    return grads{mul(g1, scale), sum_to(mul(g1, x), scale.shape()),
                 sum_to(mul(gy, mul(x, scale)), spatial.shape())};
  }
  const Split3 block = channel_block(x);
  const Tensor xc = detail::contiguous_data(x), sc = detail::contiguous_data(scale),
               pc = detail::contiguous_data(spatial);
  Tensor gx = Tensor::empty(xc.shape(), xc.dtype(), xc.device());
  Tensor g_scale = Tensor::empty(sc.shape(), sc.dtype(), sc.device());
  Tensor g_spatial = Tensor::empty(pc.shape(), pc.dtype(), pc.device());
  if (gx.numel() > 0)
    xc.backend().mul3_backward(detail::block_view(detail::contiguous_data(gy), block),
                               detail::block_view(xc, block), as_matrix(sc, block.outer, block.mid),
                               detail::reduced_block_view(pc, block), detail::block_view(gx, block),
                               as_matrix(g_scale, block.outer, block.mid),
                               detail::reduced_block_view(g_spatial, block));
  else
    g_scale = zeros(sc.shape(), {.dtype = sc.dtype(), .device = sc.device()}),
    g_spatial = zeros(pc.shape(), {.dtype = pc.dtype(), .device = pc.device()});
  return grads{gx, g_scale, g_spatial};
}

}  // namespace

QKV_RECORDED_OP("mul3", "engine", composed);
Tensor mul3(const Tensor& x, const Tensor& scale, const Tensor& spatial) {
  const char* name = "mul3";
  check_mul3_operands(x, scale, spatial, name);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const Split3 block = channel_block(x);
  if (out.numel() > 0)
    x.backend().mul3(detail::block_view(detail::contiguous_data(x), block),
                     as_matrix(detail::contiguous_data(scale), block.outer, block.mid),
                     detail::reduced_block_view(detail::contiguous_data(spatial), block),
                     detail::block_view(out, block));
  return record(name, {x, scale, spatial}, out, [x, scale, spatial](const Tensor& gy) {
    return mul3_gradients(gy, x, scale, spatial);
  });
}

// The residual comes first among the inputs, as in add_relu(residual, y): the backward sweep runs
// the rules of x's graph before the residual's (autograd.cpp's topo_order), which a residual
// block's shortcut relies on (nn/residual_block.cpp).
QKV_RECORDED_OP("mul3_add_relu", "engine", composed);
Tensor mul3_add_relu(const Tensor& residual, const Tensor& x, const Tensor& scale,
                     const Tensor& spatial) {
  const char* name = "mul3_add_relu";
  check_mul3_operands(x, scale, spatial, name);
  detail::check_defined(residual, name, "residual");
  detail::check_same_dtype(x, residual, name);
  detail::check_same_device(x, residual, name);
  QKV_CHECK(residual.shape() == x.shape(), name, "residual must be ", shape_str(x.shape()),
            " (x's shape), got ", shape_str(residual.shape()));
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const Split3 block = channel_block(x);
  if (out.numel() > 0)
    x.backend().mul3_add_relu(detail::block_view(detail::contiguous_data(residual), block),
                              detail::block_view(detail::contiguous_data(x), block),
                              as_matrix(detail::contiguous_data(scale), block.outer, block.mid),
                              detail::reduced_block_view(detail::contiguous_data(spatial), block),
                              detail::block_view(out, block));
  // add_relu's rule (gy masked by the output: the residual's gradient), then mul3's at that
  return record(name, {residual, x, scale, spatial}, out,
                [x, scale, spatial, kept = out.detach()](const Tensor& gy) {
                  const Tensor g = relu_backward(gy, kept);
                  grads product = mul3_gradients(g, x, scale, spatial);
                  return grads{g, product[0], product[1], product[2]};
                });
}

}  // namespace qkv
