// Every nn gradcheck case passes in float64, every op nn declares has a case, and the nn cases
// whose graph holds only composed backwards pass gradgradcheck. (Module types are guarded by
// tests/models/test_registry_scan.cpp.)
#include <boost/test/unit_test.hpp>

#include "engine/error.h"
#include "engine/op_registry.h"
#include "engine/ops.h"
#include "nn/gradcheck_cases.h"
#include "tests/second_order_checks.h"

using namespace qkv;

BOOST_AUTO_TEST_SUITE(nn_gradcheck)

BOOST_AUTO_TEST_CASE(every_nn_case_passes) {
  OpRegistry registry;
  nn::register_gradcheck_cases(registry);
  BOOST_CHECK_GE(registry.cases().size(), 50u);
  for (const GradcheckCase& c : registry.cases()) {
    BOOST_CHECK_EQUAL(c.layer, "nn");
    if (!OpRegistry::runnable(c)) continue;
    GradcheckResult r = OpRegistry::run(c);
    BOOST_CHECK_MESSAGE(r.ok, c.op << ": max abs err " << r.max_abs_err << "; " << r.message);
  }
}

BOOST_AUTO_TEST_CASE(every_declared_nn_op_has_a_case) {
  OpRegistry registry;
  nn::register_gradcheck_cases(registry);
  BOOST_CHECK(find_declared_op("efficient_attention") && find_declared_op("checkpoint"));
  for (const OpDeclaration& d : registry.ops_without_case("nn"))
    BOOST_ERROR("op '" << d.name << "' (declared at " << d.file << ":" << d.line
                       << ") has no gradcheck case");
}

BOOST_AUTO_TEST_CASE(composed_nn_cases_pass_gradgradcheck) {
  OpRegistry registry;
  nn::register_gradcheck_cases(registry);
  const test::SecondOrderCounts n = test::check_second_order(registry.cases(), "nn");
  BOOST_TEST_MESSAGE(n.composed << " nn cases checked to second order");
  BOOST_CHECK_GE(n.composed, 10);
}

BOOST_AUTO_TEST_SUITE_END()
