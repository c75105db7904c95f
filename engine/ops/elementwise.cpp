// Elementwise ops: unary math, binary arithmetic with NumPy broadcasting, comparisons, where.
// Each forward sits beside its derivative; binary backward sums the gradient back over the
// dimensions that were broadcast (sum_to).
#include <cmath>
#include <optional>
#include <utility>

#include "engine/gelu.h"
#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

using detail::unary_kernel;

// ---- unary --------------------------------------------------------------------------------------

namespace {
Tensor unary_floating(UnaryOp op, const Tensor& x, const char* name, double scalar = 0) {
  detail::check_defined(x, name);
  detail::check_f32_or_f64(x, name);
  return unary_kernel(op, x, scalar);
}

// The output as a backward rule should read it. Rules keep the output detached (autograd.h: the
// output owns the node), which is right for a first derivative; when the rule is itself recorded
// (create_graph) the output is recomputed from the input, so its dependence on x stays in the
// graph and the second derivative is complete.
Tensor output_for_backward(const Tensor& saved, const Tensor& x, Tensor (*op)(const Tensor&)) {
  return grad_enabled() ? op(x) : saved;
}
}  // namespace

QKV_RECORDED_OP("neg", "engine", composed);
Tensor neg(const Tensor& x) {
  detail::check_defined(x, "neg");
  Tensor y = unary_kernel(UnaryOp::neg, x);
  return record("neg", {x}, y, [](const Tensor& gy) { return grads{neg(gy)}; });
}

QKV_RECORDED_OP("exp", "engine", composed);
Tensor exp(const Tensor& x) {
  Tensor y = unary_floating(UnaryOp::exp, x, "exp");
  return record("exp", {x}, y, [x, y = y.detach()](const Tensor& gy) {
    return grads{mul(gy, output_for_backward(y, x, exp))};
  });
}

QKV_RECORDED_OP("log", "engine", composed);
Tensor log(const Tensor& x) {
  Tensor y = unary_floating(UnaryOp::log, x, "log");
  return record("log", {x}, y, [x](const Tensor& gy) { return grads{div(gy, x)}; });
}

QKV_RECORDED_OP("sqrt", "engine", composed);
Tensor sqrt(const Tensor& x) {
  Tensor y = unary_floating(UnaryOp::sqrt, x, "sqrt");
  return record("sqrt", {x}, y, [x, y = y.detach()](const Tensor& gy) {
    // d sqrt(x) = 1 / (2 sqrt(x))
    return grads{div(gy, mul(output_for_backward(y, x, sqrt), 2.0))};
  });
}

QKV_RECORDED_OP("rsqrt", "engine", composed);
Tensor rsqrt(const Tensor& x) {
  Tensor y = unary_floating(UnaryOp::rsqrt, x, "rsqrt");
  return record("rsqrt", {x}, y, [x, y = y.detach()](const Tensor& gy) {
    // d x^-1/2 = -1/2 x^-3/2
    return grads{mul(gy, mul(pow(output_for_backward(y, x, rsqrt), 3.0), -0.5))};
  });
}

QKV_RECORDED_OP("abs", "engine", composed);
Tensor abs(const Tensor& x) {
  Tensor y = unary_floating(UnaryOp::abs, x, "abs");
  return record("abs", {x}, y,
                [x](const Tensor& gy) { return grads{mul(gy, unary_kernel(UnaryOp::sign, x))}; });
}

QKV_RECORDED_OP("pow", "engine", composed);
Tensor pow(const Tensor& x, double exponent) {
  Tensor y = unary_floating(UnaryOp::pow_scalar, x, "pow", exponent);
  return record("pow", {x}, y, [x, exponent](const Tensor& gy) {
    if (exponent == 0) return grads{zeros_like(x)};
    return grads{mul(gy, mul(pow(x, exponent - 1), exponent))};
  });
}

QKV_RECORDED_OP("square", "engine", composed);
Tensor square(const Tensor& x) {
  Tensor y = unary_floating(UnaryOp::square, x, "square");
  return record("square", {x}, y, [x](const Tensor& gy) { return grads{mul(gy, mul(x, 2.0))}; });
}

QKV_RECORDED_OP("tanh", "engine", composed);
Tensor tanh(const Tensor& x) {
  Tensor y = unary_floating(UnaryOp::tanh, x, "tanh");
  return record("tanh", {x}, y, [x, y = y.detach()](const Tensor& gy) {
    return grads{mul(gy, rsub(square(output_for_backward(y, x, tanh)), 1.0))};  // 1 - tanh^2
  });
}

QKV_RECORDED_OP("sigmoid", "engine", composed);
Tensor sigmoid(const Tensor& x) {
  Tensor y = unary_floating(UnaryOp::sigmoid, x, "sigmoid");
  return record("sigmoid", {x}, y, [x, y = y.detach()](const Tensor& gy) {
    Tensor s = output_for_backward(y, x, sigmoid);
    return grads{mul(gy, mul(s, rsub(s, 1.0)))};  // s (1 - s)
  });
}

namespace {

// gelu's second derivative, composed of recorded ops (so a third one exists too).
//   erf:  gelu''(x) = phi(x) (2 - x^2), phi the standard normal density
//   tanh: with u = k (x + c x^3), t = tanh(u):
//         gelu''(x) = (1 - t^2) (u' - x t u'^2 + x u'' / 2),  u' = k (1 + 3c x^2), u'' = 6 k c x
Tensor gelu_second_derivative(const Tensor& x, bool tanh_approximation) {
  const double k = gelu_constants::kSqrt2OverPi, c = gelu_constants::kCubic;
  if (!tanh_approximation) {
    Tensor phi = mul(exp(mul(square(x), -0.5)), gelu_constants::kInvSqrt2Pi);
    return mul(phi, rsub(square(x), 2.0));
  }
  Tensor t = tanh(mul(add(x, mul(pow(x, 3.0), c)), k));
  Tensor du = mul(add(mul(square(x), 3 * c), 1.0), k);
  Tensor inner = add(sub(du, mul(mul(x, t), square(du))), mul(square(x), 3 * k * c));
  return mul(rsub(square(t), 1.0), inner);
}

}  // namespace

QKV_RECORDED_OP("gelu", "engine", composed);
Tensor gelu(const Tensor& x, GeluApprox approximate) {
  bool t = approximate == GeluApprox::tanh;
  Tensor y = unary_floating(t ? UnaryOp::gelu_tanh : UnaryOp::gelu_erf, x, "gelu");
  return record("gelu", {x}, y, [x, approximate](const Tensor& gy) {
    return grads{gelu_backward(gy, x, approximate)};
  });
}

// ---- binary -------------------------------------------------------------------------------------

namespace {

// Broadcasts a and b and runs the kernel; out_dtype is a's dtype for arithmetic, bool otherwise.
Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const char* name,
                     bool to_bool) {
  detail::check_defined(a, name);
  detail::check_defined(b, name);
  detail::check_same_device(a, b, name);
  detail::check_same_dtype(a, b, name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, to_bool ? DType::b8 : a.dtype(), a.device());
  a.backend().binary(op, detail::broadcast_view(a, shape), detail::broadcast_view(b, shape), out);
  return out;
}

Tensor arithmetic(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  detail::check_defined(a, name);
  QKV_CHECK(a.dtype() != DType::b8, name,
            "arithmetic on a bool tensor; convert it with to() first");
  return binary_kernel(op, a, b, name, false);
}

}  // namespace

// relu's gradient in one pass: gy where x > 0, else 0, even where gy is inf or NaN (PyTorch's
// threshold_backward; gy * step(x) would give NaN there). Recorded, so that a gradient taken with
// create_graph can be differentiated again: linear in gy, flat in x.
QKV_RECORDED_OP("relu_backward", "engine", composed);
Tensor relu_backward(const Tensor& gy, const Tensor& x) {
  Tensor g = binary_kernel(BinaryOp::relu_backward, gy, x, "relu_backward", false);
  return record("relu_backward", {gy, x}, g, [x](const Tensor& gg) {
    return grads{relu_backward(gg, x), Tensor()};
  });
}

// gelu's gradient in one pass: gy * gelu'(x), reading gy and x once and writing the result, where
// mul(gy, gelu'(x)) would write gelu'(x) and read it back. The same value as that product: the
// kernel computes gelu'(x) as the unary one did and multiplies it as mul does. Recorded, so that a
// gradient taken with create_graph can be differentiated again: linear in gy, and in x through
// gelu''.
QKV_RECORDED_OP("gelu_backward", "engine", composed);
Tensor gelu_backward(const Tensor& gy, const Tensor& x, GeluApprox approximate) {
  detail::check_defined(x, "gelu_backward");
  detail::check_f32_or_f64(x, "gelu_backward");
  const bool t = approximate == GeluApprox::tanh;
  Tensor g = binary_kernel(t ? BinaryOp::gelu_tanh_backward : BinaryOp::gelu_erf_backward, gy, x,
                           "gelu_backward", false);
  return record("gelu_backward", {gy, x}, g, [gy, x, approximate, t](const Tensor& gg) {
    return grads{gelu_backward(gg, x, approximate), mul(mul(gg, gy), gelu_second_derivative(x, t))};
  });
}

QKV_RECORDED_OP("relu", "engine", composed);
Tensor relu(const Tensor& x) {
  Tensor y = unary_floating(UnaryOp::relu, x, "relu");
  return record("relu", {x}, y, [x](const Tensor& gy) { return grads{relu_backward(gy, x)}; });
}

QKV_RECORDED_OP("add", "engine", composed);
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = arithmetic(BinaryOp::add, a, b, "add");
  return record("add", {a, b}, y, [sa = a.shape(), sb = b.shape()](const Tensor& gy) {
    return grads{sum_to(gy, sa), sum_to(gy, sb)};
  });
}

// The output is relu's, so it gives relu's mask: y > 0 exactly where a + b > 0 (a NaN sum passes
// both), and the backward masks gy by y as relu's masks it by its input.
QKV_RECORDED_OP("add_relu", "engine", composed);
Tensor add_relu(const Tensor& a, const Tensor& b) {
  Tensor y = arithmetic(BinaryOp::add_relu, a, b, "add_relu");
  return record("add_relu", {a, b}, y,
                [sa = a.shape(), sb = b.shape(), y = y.detach()](const Tensor& gy) {
                  const Tensor g = relu_backward(gy, y);
                  return grads{sum_to(g, sa), sum_to(g, sb)};
                });
}

QKV_RECORDED_OP("sub", "engine", composed);
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = arithmetic(BinaryOp::sub, a, b, "sub");
  return record("sub", {a, b}, y, [sa = a.shape(), sb = b.shape()](const Tensor& gy) {
    return grads{sum_to(gy, sa), sum_to(neg(gy), sb)};
  });
}

namespace {
// Where the gradient of a factor of `shape` in mul, with the other operand `other`, can skip the
// composed sum_to(mul(gy, other), shape): no graph wanted (a create_graph backward records the
// composed form, which can be differentiated again), `other` of gy's shape, and `shape` of gy's
// rank with the broadcast dims adjacent (CBAM's [B, C, 1, 1] and [B, 1, H, W] weights). Gives gy's
// shape split around those dims.
std::optional<Split3> adjacent_broadcast(const Tensor& gy, const Tensor& other,
                                         const Shape& shape) {
  if (grad_enabled() || shape == gy.shape() || other.shape() != gy.shape() ||
      int(shape.size()) != gy.dim() || (gy.dtype() != DType::f32 && gy.dtype() != DType::f64))
    return std::nullopt;
  int first = -1, last = -1;  // the broadcast dims
  for (int d = 0; d < gy.dim(); ++d)
    if (shape[d] != gy.size(d)) {
      if (first < 0) first = d;
      last = d;
    }
  // a dim between two broadcast ones must be broadcast too, or of size 1
  for (int d = first + 1; d < last; ++d)
    if (shape[d] == gy.size(d) && gy.size(d) != 1) return std::nullopt;
  return split_at(gy.shape(), first, last);
}

// sum_to(mul(gy, other), shape): the gradient of a factor of mul. For an adjacent broadcast the
// backend's product_sum takes the sum of products in one pass instead of writing the full-size
// product and reading it back.
Tensor factor_gradient(const Tensor& gy, const Tensor& other, const Shape& shape) {
  const std::optional<Split3> block = adjacent_broadcast(gy, other, shape);
  if (!block) return sum_to(mul(gy, other), shape);
  Tensor out = Tensor::empty(shape, gy.dtype(), gy.device());
  gy.backend().product_sum(detail::block_view(detail::contiguous_data(gy), *block),
                           detail::block_view(detail::contiguous_data(other), *block),
                           detail::reduced_block_view(out, *block));
  return out;
}

// Both gradients of mul(full, factor) when both are wanted and the factor is an adjacent
// broadcast: the backend's mul_gradients reads gy once for the two (full's gy * factor, the
// factor's product_sum). Else nullopt.
std::optional<std::pair<Tensor, Tensor>> both_gradients(const Tensor& gy, const Tensor& full,
                                                        const Tensor& factor) {
  const std::optional<Split3> block = adjacent_broadcast(gy, full, factor.shape());
  if (!block) return std::nullopt;
  Tensor g_full = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
  Tensor g_factor = Tensor::empty(factor.shape(), gy.dtype(), gy.device());
  gy.backend().mul_gradients(detail::block_view(detail::contiguous_data(gy), *block),
                             detail::block_view(detail::contiguous_data(full), *block),
                             detail::reduced_block_view(detail::contiguous_data(factor), *block),
                             detail::block_view(g_full, *block),
                             detail::reduced_block_view(g_factor, *block));
  return std::pair{g_full, g_factor};
}
}  // namespace

QKV_RECORDED_OP("mul", "engine", composed);
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = arithmetic(BinaryOp::mul, a, b, "mul");
  return record("mul", {a, b}, y, [a, b](const Tensor& gy) {
    if (a.requires_grad() && b.requires_grad()) {
      if (auto both = both_gradients(gy, a, b)) return grads{both->first, both->second};
      if (auto both = both_gradients(gy, b, a)) return grads{both->second, both->first};
    }
    return grads{a.requires_grad() ? factor_gradient(gy, b, a.shape()) : Tensor(),
                 b.requires_grad() ? factor_gradient(gy, a, b.shape()) : Tensor()};
  });
}

QKV_RECORDED_OP("div", "engine", composed);
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = arithmetic(BinaryOp::div, a, b, "div");
  // Integer division by zero has no answer: an error, as in PyTorch. (The kernels give 0 there
  // rather than trap, engine/scalar_math.h, so asking after the fact is safe.)
  if (b.dtype() == DType::i64)
    QKV_CHECK(sum(eq(b, 0.0)).item() == 0, "div", "integer division by zero");
  return record("div", {a, b}, y, [a, b](const Tensor& gy) {
    Tensor ga = a.requires_grad() ? sum_to(div(gy, b), a.shape()) : Tensor();
    // d(a/b)/db = -a / b^2
    Tensor gb = b.requires_grad() ? sum_to(neg(div(mul(gy, a), square(b))), b.shape()) : Tensor();
    return grads{ga, gb};
  });
}

namespace {
// maximum/minimum: the gradient goes to the selected input; ties split it evenly (as PyTorch).
QKV_RECORDED_OP("maximum", "engine", composed);
QKV_RECORDED_OP("minimum", "engine", composed);
Tensor extremum(const Tensor& a, const Tensor& b, bool is_max) {
  const char* name = is_max ? "maximum" : "minimum";
  Tensor y = arithmetic(is_max ? BinaryOp::maximum : BinaryOp::minimum, a, b, name);
  return record(name, {a, b}, y, [a, b, is_max](const Tensor& gy) {
    Tensor a_wins = (is_max ? gt(a, b) : lt(a, b)).to(gy.dtype());
    Tensor tie = eq(a, b).to(gy.dtype());
    Tensor wa = add(a_wins, mul(tie, 0.5));
    Tensor wb = rsub(wa, 1.0);
    return grads{sum_to(mul(gy, wa), a.shape()), sum_to(mul(gy, wb), b.shape())};
  });
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(a, b, false); }

QKV_RECORDED_OP("add_scalar", "engine", composed);
Tensor add(const Tensor& a, double b) {
  detail::check_defined(a, "add");
  Tensor y = unary_kernel(UnaryOp::add_scalar, a, b);
  return record("add_scalar", {a}, y, [](const Tensor& gy) { return grads{gy}; });
}

QKV_RECORDED_OP("mul_scalar", "engine", composed);
Tensor mul(const Tensor& a, double b) {
  detail::check_defined(a, "mul");
  Tensor y = unary_kernel(UnaryOp::mul_scalar, a, b);
  return record("mul_scalar", {a}, y, [b](const Tensor& gy) { return grads{mul(gy, b)}; });
}

QKV_RECORDED_OP("rsub_scalar", "engine", composed);
Tensor rsub(const Tensor& a, double b) {
  Tensor y = unary_floating(UnaryOp::rsub_scalar, a, "rsub", b);
  return record("rsub_scalar", {a}, y, [](const Tensor& gy) { return grads{neg(gy)}; });
}

// ---- comparisons (no gradient)
// ---------------------------------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) {
  return binary_kernel(BinaryOp::eq, a, b, "eq", true);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return binary_kernel(BinaryOp::ne, a, b, "ne", true);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return binary_kernel(BinaryOp::lt, a, b, "lt", true);
}
Tensor le(const Tensor& a, const Tensor& b) {
  return binary_kernel(BinaryOp::le, a, b, "le", true);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return binary_kernel(BinaryOp::gt, a, b, "gt", true);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return binary_kernel(BinaryOp::ge, a, b, "ge", true);
}
Tensor eq(const Tensor& a, double b) { return unary_kernel(UnaryOp::eq_scalar, a, b, DType::b8); }
Tensor lt(const Tensor& a, double b) { return unary_kernel(UnaryOp::lt_scalar, a, b, DType::b8); }
Tensor gt(const Tensor& a, double b) { return unary_kernel(UnaryOp::gt_scalar, a, b, DType::b8); }

namespace {
void check_bool(const Tensor& t, const char* op) {
  detail::check_defined(t, op);
  QKV_CHECK(t.dtype() == DType::b8, op, "expected a bool tensor, got ", dtype_name(t.dtype()));
}
}  // namespace

Tensor logical_and(const Tensor& a, const Tensor& b) {
  check_bool(a, "logical_and");
  check_bool(b, "logical_and");
  return binary_kernel(BinaryOp::logical_and, a, b, "logical_and", true);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  check_bool(a, "logical_or");
  check_bool(b, "logical_or");
  return binary_kernel(BinaryOp::logical_or, a, b, "logical_or", true);
}
Tensor logical_not(const Tensor& a) {
  check_bool(a, "logical_not");
  return unary_kernel(UnaryOp::logical_not, a);
}

// ---- where / masked_fill
// -------------------------------------------------------------------------

QKV_RECORDED_OP("where", "engine", composed);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_bool(cond, "where");
  detail::check_defined(a, "where");
  detail::check_defined(b, "where");
  detail::check_same_device(cond, a, "where");
  detail::check_same_device(a, b, "where");
  detail::check_same_dtype(a, b, "where");
  Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor y = Tensor::empty(shape, a.dtype(), a.device());
  a.backend().where(detail::broadcast_view(cond, shape), detail::broadcast_view(a, shape),
                    detail::broadcast_view(b, shape), y);
  return record("where", {a, b}, y, [cond, sa = a.shape(), sb = b.shape()](const Tensor& gy) {
    Tensor zero = zeros({}, {gy.dtype(), gy.device()});
    return grads{sum_to(where(cond, gy, zero), sa), sum_to(where(cond, zero, gy), sb)};
  });
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(cond, a, full({}, b, {a.dtype(), a.device()}));
}
Tensor where(const Tensor& cond, double a, const Tensor& b) {
  return where(cond, full({}, a, {b.dtype(), b.device()}), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_bool(mask, "masked_fill");
  Shape s = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  QKV_CHECK(s == x.shape(), "masked_fill", "mask of shape ", shape_str(mask.shape()),
            " does not broadcast to the input's ", shape_str(x.shape()));
  return where(mask, full({}, value, {x.dtype(), x.device()}), x);
}

}  // namespace qkv
