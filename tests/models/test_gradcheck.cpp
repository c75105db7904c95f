// Every models gradcheck case passes in float64 (each model at a toy size, see
// models/gradcheck_cases.cpp).
#include <boost/test/unit_test.hpp>

#include "engine/op_registry.h"
#include "models/gradcheck_cases.h"

using namespace qkv;

BOOST_AUTO_TEST_SUITE(models_gradcheck)

BOOST_AUTO_TEST_CASE(every_models_case_passes) {
  OpRegistry registry;
  models::register_gradcheck_cases(registry);
  BOOST_CHECK_GE(registry.cases().size(), 6u);
  for (const GradcheckCase& c : registry.cases()) {
    BOOST_CHECK_EQUAL(c.layer, "models");
    GradcheckResult r = OpRegistry::run(c);
    BOOST_CHECK_MESSAGE(r.ok, c.op << ": max abs err " << r.max_abs_err << "; " << r.message);
  }
}

BOOST_AUTO_TEST_SUITE_END()
