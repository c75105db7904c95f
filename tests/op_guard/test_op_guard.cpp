// The op guard seen failing: this executable adds an engine op, softplus, in its own translation
// unit - declared and recorded exactly as a real op would be, with no gradcheck case - and checks
// that the guard the engine suite runs (OpRegistry::ops_without_case) reports it by name and
// place. It is its own executable so that the deliberately uncovered op stays out of the other
// suites.
#include <boost/test/unit_test.hpp>
#include <string>

#include "engine/op_registry.h"
#include "engine/ops.h"

using namespace qkv;

namespace {

QKV_RECORDED_OP("softplus", "engine", composed);
Tensor softplus(const Tensor& x) {
  Tensor y = log(add(exp(x.detach()), 1.0));
  return record("softplus", {x}, y, [x](const Tensor& gy) { return grads{mul(gy, sigmoid(x))}; });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(op_guard)

BOOST_AUTO_TEST_CASE(an_op_without_a_case_is_reported_by_name) {
  // The op works (it is declared, so record() accepts it) and is correct...
  Tensor x = tensor({-1.0, 0.5, 2.0}, {}, {DType::f64}).requires_grad_();
  BOOST_CHECK(gradcheck([](const std::vector<Tensor>& in) { return softplus(in[0]); }, {x}).ok);
  // ...but has no case, and the engine's guard names it - and only it.
  std::vector<OpDeclaration> missing = OpRegistry::global().ops_without_case("engine");
  BOOST_REQUIRE_EQUAL(missing.size(), 1u);
  BOOST_CHECK_EQUAL(missing[0].name, "softplus");
  BOOST_CHECK_EQUAL(missing[0].layer, "engine");
  BOOST_CHECK(std::string(missing[0].file).ends_with("tests/op_guard/test_op_guard.cpp"));
  // A case named after it is what the guard wants.
  OpRegistry with_case;
  register_engine_gradcheck_cases(with_case);
  with_case.add({"softplus", "engine", {{{3}}}, [](const std::vector<Tensor>& in) {
                   return softplus(in[0]);
                 }});
  BOOST_CHECK(with_case.ops_without_case("engine").empty());
}

BOOST_AUTO_TEST_SUITE_END()
