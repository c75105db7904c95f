// dropout: one recorded op over the backend's dropout kernels, forward and backward. The forward
// draws the keep decisions from the generator exactly as a Bernoulli fill of x's shape would (the
// sequential stream, or by example while an ExampleDraws lives, engine/example_draws.h), so the
// output is bitwise mul(x, bernoulli(...)); the backend keeps the mask in the form its backward
// reads (one byte per element on the CPU). gelu_dropout is dropout of gelu(x) as one op over the
// backend's fused kernels, which a feed-forward block with a GELU calls; dropout_add is a residual
// block's residual + dropout(x) in one pass.
#include <vector>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/example_draws.h"
#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

// The backward applies the forward's mask to the gradient: linear in it, so it is its own
// derivative, recorded as dropout again.
QKV_RECORDED_OP("dropout", "engine", composed);

namespace {

Tensor apply_mask(const Tensor& gy, const Tensor& mask, double p) {
  Tensor gx = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
  gy.backend().dropout_backward(detail::contiguous_data(gy), mask, p, gx);
  return record("dropout", {gy}, gx,
                [mask, p](const Tensor& g) { return grads{apply_mask(g, mask, p)}; });
}

// The keep decisions a Bernoulli fill of x's shape would draw from the generator: the sequential
// stream, or by example while an ExampleDraws lives (row b from example b's id: one counter per
// call, its own key).
DropoutDraws take_draws(const Tensor& x, Generator* gen, const char* op) {
  Generator& g = gen ? *gen : default_generator();
  DropoutDraws draws;
  if (g.example_ids().empty()) {
    draws.seed = g.seed();
    draws.offset = g.take(uint64_t(x.numel()));
  } else {
    const std::vector<uint64_t>& ids = g.example_ids();
    example_layout(x.shape(), ids.size(), op);
    draws.key = philox::call_key(g.seed(), g.take(1));
    draws.examples =
        tensor_i64(std::vector<int64_t>(ids.begin(), ids.end()), {int64_t(ids.size())}, x.device());
  }
  return draws;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  detail::check_defined(x, "dropout");
  QKV_CHECK(p >= 0 && p <= 1, "dropout", "probability ", p, " is outside [0, 1]");
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, 0.0);
  detail::check_f32_or_f64(x, "dropout");
  const DropoutDraws draws = take_draws(x, gen, "dropout");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mask = x.backend().dropout_forward(detail::contiguous_data(x), draws, p, y);
  return record("dropout", {x}, y,
                [mask, p](const Tensor& gy) { return grads{apply_mask(gy, mask, p)}; });
}

// dropout(gelu(x)) with the same draws, in one pass each way (Backend::gelu_dropout_forward).
// The backward runs the fused kernel, or under create_graph the composed ops it equals (the mask,
// then gelu_backward), so a gradient taken through it can be differentiated again.
QKV_RECORDED_OP("gelu_dropout", "engine", composed);
Tensor gelu_dropout(const Tensor& x, double p, bool training, Generator* gen,
                    GeluApprox approximate) {
  detail::check_defined(x, "gelu_dropout");
  QKV_CHECK(p >= 0 && p <= 1, "gelu_dropout", "probability ", p, " is outside [0, 1]");
  if (!training || p == 0 || p == 1) return dropout(gelu(x, approximate), p, training, gen);
  detail::check_f32_or_f64(x, "gelu_dropout");
  const UnaryOp form = approximate == GeluApprox::tanh ? UnaryOp::gelu_tanh : UnaryOp::gelu_erf;
  const DropoutDraws draws = take_draws(x, gen, "gelu_dropout");
  const Tensor xc = detail::contiguous_data(x.detach());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mask = x.backend().gelu_dropout_forward(xc, form, draws, p, y);
  return record("gelu_dropout", {x}, y, [x, xc, mask, p, form, approximate](const Tensor& gy) {
    if (grad_enabled()) return grads{gelu_backward(apply_mask(gy, mask, p), x, approximate)};
    Tensor gx = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
    gy.backend().gelu_dropout_backward(detail::contiguous_data(gy), xc, form, mask, p, gx);
    return grads{gx};
  });
}

// residual + dropout(x) with the same draws, in one pass (Backend::dropout_add_forward). The
// residual's gradient is the incoming one; x's is dropout's backward, a recorded op, so the
// gradient is differentiable again without a path of its own.
QKV_RECORDED_OP("dropout_add", "engine", composed);
Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training,
                   Generator* gen) {
  detail::check_defined(x, "dropout_add");
  detail::check_defined(residual, "dropout_add");
  detail::check_same_dtype(x, residual, "dropout_add");
  detail::check_same_device(x, residual, "dropout_add");
  QKV_CHECK(p >= 0 && p <= 1, "dropout_add", "probability ", p, " is outside [0, 1]");
  if (!training || p == 0 || p == 1 || residual.shape() != x.shape())
    return add(residual, dropout(x, p, training, gen));
  detail::check_f32_or_f64(x, "dropout_add");
  const DropoutDraws draws = take_draws(x, gen, "dropout_add");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mask = x.backend().dropout_add_forward(detail::contiguous_data(x),
                                                detail::contiguous_data(residual), draws, p, y);
  return record("dropout_add", {x, residual}, y, [mask, p](const Tensor& gy) {
    return grads{apply_mask(gy, mask, p), gy};
  });
}

}  // namespace qkv
