// Every engine case passes gradcheck in float64; every declared engine op has a case; no op records
// undeclared; second derivatives through every composed op pass gradgradcheck, and create_graph
// through a kernel backward is an error naming the op; gradcheck and gradgradcheck themselves
// catch wrong rules.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/op_registry.h"
#include "engine/ops.h"
#include "tests/engine/helpers.h"
#include "tests/second_order_checks.h"

using namespace qkv;
using qkv::testing::check_error;

// Ops of this file's own tests: deliberately wrong rules for the checkers to catch.
QKV_RECORDED_OP("wrong_square", "test", composed);
QKV_RECORDED_OP("cube_with_detached_rule", "test", composed);

BOOST_AUTO_TEST_SUITE(gradcheck_suite)

BOOST_AUTO_TEST_CASE(every_engine_op_passes_gradcheck) {
  const OpRegistry& registry = OpRegistry::global();
  BOOST_CHECK_GE(registry.size(), 35u);
  for (const GradcheckCase& c : registry.cases()) {
    if (c.layer != "engine" || !OpRegistry::runnable(c)) continue;
    GradcheckResult r = OpRegistry::run(c);
    BOOST_CHECK_MESSAGE(r.ok, c.op << ": max abs err " << r.max_abs_err << "; " << r.message);
  }
}

BOOST_AUTO_TEST_CASE(every_declared_engine_op_has_a_case) {
  // The declarations sit beside the ops (QKV_RECORDED_OP), so this sees an op no case calls.
  size_t engine_ops = 0;
  for (const OpDeclaration& d : declared_ops()) engine_ops += d.layer == "engine";
  BOOST_CHECK_GE(engine_ops, 40u);
  for (const OpDeclaration& d : OpRegistry::global().ops_without_case("engine"))
    BOOST_ERROR("op '" << d.name << "' (declared at " << d.file << ":" << d.line
                       << ") has no gradcheck case");
}

BOOST_AUTO_TEST_CASE(a_case_named_after_an_op_records_that_op) {
  for (const GradcheckCase& c : OpRegistry::global().cases()) {
    if (c.layer != "engine" || !find_declared_op(c.op) || !OpRegistry::runnable(c)) continue;
    RecordedOps trace;
    sum(c.fn(OpRegistry::make_inputs(c))).backward();
    auto names = trace.names();
    BOOST_CHECK_MESSAGE(std::find(names.begin(), names.end(), c.op) != names.end(),
                        "the case named '" << c.op << "' never records " << c.op);
  }
}

BOOST_AUTO_TEST_CASE(recording_an_undeclared_op_is_an_error_naming_it) {
  Tensor x = tensor({1.0, 2.0}, {}, {DType::f64}).requires_grad_();
  auto softplus = [](const Tensor& x) {
    Tensor y = log(add(exp(x), 1.0)).detach();
    return record("softplus", {x}, y, [x](const Tensor& gy) { return grads{mul(gy, sigmoid(x))}; });
  };
  check_error([&] { softplus(x); },
              {"record: op 'softplus' is not declared: add QKV_RECORDED_OP(\"softplus\", layer, "
               "composed|kernel) beside its definition"});
  NoGrad no_grad;  // nothing is recorded, so nothing is refused
  BOOST_CHECK_NO_THROW(softplus(x));
}

BOOST_AUTO_TEST_CASE(create_graph_through_a_kernel_backward_names_the_op) {
  Tensor x = tensor({0.5, -1.0, 2.0}, {}, {DType::f64}).requires_grad_();
  BOOST_REQUIRE(find_declared_op("softmax")->backward == OpBackward::kernel);
  Tensor y = sum(mul(softmax(x, 0), tensor({1.0, 2.0, 3.0}, {}, {DType::f64})));
  check_error([&] { grad(y, {x}, Tensor(), true, /*create_graph=*/true); },
              {"backward: create_graph through op 'softmax', whose backward runs raw kernels"});
  BOOST_CHECK_NO_THROW(grad(y, {x}));  // a first derivative is fine
}

BOOST_AUTO_TEST_CASE(gelu_second_derivative_matches_its_formula) {
  // d2/dx2 gelu(x) = phi(x) (2 - x^2) for the erf form, computed here in double directly.
  std::vector<double> xs{-4.0, -1.3, -0.2, 0.0, 0.7, 2.5};
  Tensor x = tensor(xs, {}, {DType::f64}).requires_grad_();
  Tensor g = grad(sum(gelu(x)), {x}, Tensor(), false, /*create_graph=*/true)[0];
  std::vector<double> gg = grad(sum(g), {x})[0].to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    double phi = std::exp(-0.5 * xs[i] * xs[i]) / std::sqrt(2 * M_PI);
    BOOST_CHECK_CLOSE(gg[i] + 1, phi * (2 - xs[i] * xs[i]) + 1, 1e-9);
  }
}

BOOST_AUTO_TEST_CASE(every_composed_engine_op_passes_gradgradcheck) {
  const test::SecondOrderCounts n =
      test::check_second_order(OpRegistry::global().cases(), "engine");
  BOOST_TEST_MESSAGE(n.composed << " cases checked to second order, " << n.stopped_at_kernel
                                << " stop at a kernel");
  BOOST_CHECK_GE(n.composed, 50);
}

BOOST_AUTO_TEST_CASE(gradcheck_catches_a_wrong_backward) {
  // x^2 with a backward that forgets the factor 2
  GradcheckFn wrong = [](const std::vector<Tensor>& x) {
    Tensor y = square(x[0]).detach();
    return record("wrong_square", {x[0]}, y,
                  [x = x[0]](const Tensor& gy) { return grads{mul(gy, x)}; });
  };
  Tensor x = tensor({0.5, 1.5, -2.0}, {}, {DType::f64}).requires_grad_();
  GradcheckResult r = gradcheck(wrong, {x});
  BOOST_CHECK(!r.ok);
  BOOST_CHECK_GT(r.max_abs_err, 0.4);
  BOOST_CHECK_EQUAL(r.worst_input, 0);
  // and passes the right one
  BOOST_CHECK(gradcheck([](const std::vector<Tensor>& x) { return square(x[0]); }, {x}).ok);
}

BOOST_AUTO_TEST_CASE(gradgradcheck_catches_a_rule_that_is_right_only_once) {
  // x^3 whose rule reads x detached: the first derivative is right, the second is missing.
  GradcheckFn detached = [](const std::vector<Tensor>& x) {
    Tensor y = pow(x[0], 3.0).detach();
    return record("cube_with_detached_rule", {x[0]}, y, [x = x[0].detach()](const Tensor& gy) {
      return grads{mul(gy, mul(square(x), 3.0))};
    });
  };
  Tensor x = tensor({0.5, 1.5, -2.0}, {}, {DType::f64}).requires_grad_();
  BOOST_CHECK(gradcheck(detached, {x}).ok);
  GradcheckResult r = gradgradcheck(detached, {x});
  BOOST_CHECK(!r.ok);
  BOOST_CHECK_GT(r.max_abs_err, 1.0);  // d2/dx2 = 6x, times a random gy of order 1
  BOOST_CHECK(gradgradcheck([](const std::vector<Tensor>& x) { return pow(x[0], 3.0); }, {x}).ok);
}

BOOST_AUTO_TEST_SUITE_END()
