// Every nn gradcheck case passes in float64, and nn adds no recorded op without a case.
#include <boost/test/unit_test.hpp>

#include "engine/op_registry.h"
#include "engine/ops.h"
#include "nn/gradcheck_cases.h"

using namespace qkv;

BOOST_AUTO_TEST_SUITE(nn_gradcheck)

BOOST_AUTO_TEST_CASE(every_nn_case_passes) {
  OpRegistry registry;
  nn::register_gradcheck_cases(registry);
  BOOST_CHECK_GE(registry.cases().size(), 30u);
  for (const GradcheckCase& c : registry.cases()) {
    BOOST_CHECK_EQUAL(c.layer, "nn");
    GradcheckResult r = OpRegistry::run(c);
    BOOST_CHECK_MESSAGE(r.ok, c.op << ": max abs err " << r.max_abs_err << "; " << r.message);
  }
}

BOOST_AUTO_TEST_CASE(nn_records_only_engine_ops) {
  OpRegistry registry;
  nn::register_gradcheck_cases(registry);
  RecordedOps trace;
  for (const GradcheckCase& c : registry.cases()) {
    auto inputs = OpRegistry::make_inputs(c);
    sum(c.fn(inputs)).backward();
  }
  for (const std::string& name : trace.names())
    BOOST_CHECK_MESSAGE(OpRegistry::global().declared(name) || registry.declared(name),
                        "op '" << name << "' records itself but has no gradcheck case");
}

BOOST_AUTO_TEST_SUITE_END()
