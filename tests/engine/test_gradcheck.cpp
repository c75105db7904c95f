// Every registered op passes gradcheck in float64; every declared op has a case; gradcheck itself
// catches a wrong backward.
#include <boost/test/unit_test.hpp>

#include "engine/op_registry.h"
#include "engine/ops.h"
#include "tests/engine/helpers.h"

using namespace qkv;

BOOST_AUTO_TEST_SUITE(gradcheck_suite)

BOOST_AUTO_TEST_CASE(every_engine_op_passes_gradcheck) {
  const OpRegistry& registry = OpRegistry::global();
  BOOST_CHECK_GE(registry.size(), 35u);
  for (const GradcheckCase& c : registry.cases()) {
    if (c.layer != "engine") continue;
    GradcheckResult r = OpRegistry::run(c);
    BOOST_CHECK_MESSAGE(r.ok, c.op << ": max abs err " << r.max_abs_err << "; " << r.message);
  }
}

BOOST_AUTO_TEST_CASE(every_declared_op_has_a_case) {
  auto missing = OpRegistry::global().ops_without_case();
  BOOST_CHECK_MESSAGE(missing.empty(), "ops without a gradcheck case: " << missing.size());
}

BOOST_AUTO_TEST_CASE(an_unregistered_op_is_reported) {
  OpRegistry registry;
  register_engine_gradcheck_cases(registry);
  registry.declare("deliberately_unregistered_op", "test");
  auto missing = registry.ops_without_case();
  BOOST_REQUIRE_EQUAL(missing.size(), 1u);
  BOOST_CHECK_EQUAL(missing[0], "deliberately_unregistered_op");
}

BOOST_AUTO_TEST_CASE(every_recorded_op_is_declared) {
  // Run all cases while tracing which op names record themselves in the graph; each must be a
  // declared op (with a case), so a new op cannot slip in without one.
  RecordedOps trace;
  for (const GradcheckCase& c : OpRegistry::global().cases()) {
    if (c.layer != "engine") continue;
    auto inputs = OpRegistry::make_inputs(c);
    sum(c.fn(inputs)).backward();
  }
  for (const std::string& name : trace.names())
    BOOST_CHECK_MESSAGE(OpRegistry::global().declared(name),
                        "op '" << name << "' records itself but has no gradcheck case");
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

BOOST_AUTO_TEST_SUITE_END()
