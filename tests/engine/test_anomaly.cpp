// Anomaly mode: the first op whose forward output or backward gradient holds a NaN/Inf is named,
// ops that only pass along an infinity they were given (attention masks) are not, and with the
// mode off nothing changes. Every registry case also runs clean under it (no false alarms).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/op_registry.h"
#include "engine/ops.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::message_has;

namespace {

Tensor leaf(const Shape& shape, double low, double high) {
  Tensor x = uniform(shape, low, high);
  x.requires_grad_();
  return x;
}

}  // namespace

QKV_RECORDED_OP("two_inputs", "test", composed);  // an op of the test below

BOOST_AUTO_TEST_SUITE(anomaly_mode)

BOOST_AUTO_TEST_CASE(off_by_default_and_the_guard_restores_it) {
  BOOST_CHECK(!anomaly_enabled());
  {
    AnomalyMode outer;
    BOOST_CHECK(anomaly_enabled());
    {
      AnomalyMode inner;
      BOOST_CHECK(anomaly_enabled());
    }
    BOOST_CHECK(anomaly_enabled());  // the inner guard restores the outer's state
  }
  BOOST_CHECK(!anomaly_enabled());
}

BOOST_AUTO_TEST_CASE(off_a_nan_flows_through_as_in_pytorch) {
  Tensor x = leaf({4, 8}, 0.0, 1.0);
  Tensor y = log(x - 3.0);  // no throw without the mode
  BOOST_CHECK(std::isnan(y.to_vector<double>()[0]));
  Tensor z = zeros({3});
  z.requires_grad_();
  sum(sqrt(z)).backward();
  BOOST_CHECK(std::isinf(z.grad().to_vector<double>()[0]));
}

BOOST_AUTO_TEST_CASE(log_of_a_negative_is_named_in_forward) {
  Tensor x = leaf({4, 8}, 0.0, 1.0);
  AnomalyMode anomaly;
  Tensor shifted = x - 3.0;  // finite: not flagged
  BOOST_CHECK_EXCEPTION(log(shifted), Error,
                        message_has({"anomaly: op 'log' produced NaN", "forward output",
                                     "shape [4,8]", "from finite inputs"}));
}

BOOST_AUTO_TEST_CASE(the_first_op_in_a_chain_is_named) {
  // exp overflows to Inf; the next op (mul by 0) turns that into NaN. exp is the culprit.
  Tensor x = leaf({2, 3}, 100.0, 101.0);
  AnomalyMode anomaly;
  BOOST_CHECK_EXCEPTION(mul(exp(x), 0.0), Error,
                        message_has({"op 'exp' produced Inf", "forward", "[2,3]"}));
}

BOOST_AUTO_TEST_CASE(a_nan_in_the_data_is_reported_as_such) {
  Tensor w = leaf({3, 2}, -1.0, 1.0);
  Tensor data = tensor({1, NAN, 2, 3, 4, 5}, {2, 3});
  AnomalyMode anomaly;
  BOOST_CHECK_EXCEPTION(matmul(data, w), Error,
                        message_has({"op 'matmul' produced NaN",
                                     "input 0 (shape [2,3]) already "
                                     "held NaN"}));
}

BOOST_AUTO_TEST_CASE(also_checked_without_a_graph) {
  // Inference under NoGrad records nothing, but its ops still pass record(): still checked.
  NoGrad no_grad;
  AnomalyMode anomaly;
  BOOST_CHECK_EXCEPTION(sqrt(tensor({-1.0})), Error, message_has({"op 'sqrt' produced NaN"}));
}

BOOST_AUTO_TEST_CASE(sqrt_at_zero_is_named_in_backward) {
  Tensor x = zeros({3});
  x.requires_grad_();
  AnomalyMode anomaly;
  Tensor y = sum(sqrt(x));  // forward is finite: sqrt(0) = 0
  BOOST_CHECK_EXCEPTION(y.backward(), Error,
                        message_has({"anomaly: op 'sqrt' produced Inf", "backward gradient",
                                     "input 0 (shape [3])", "from a finite output gradient"}));
}

BOOST_AUTO_TEST_CASE(only_inputs_that_want_a_gradient_are_checked_in_backward) {
  // A rule may compute a gradient for an input that wants none; backward drops it, and so does
  // the check. This op's rule returns Inf for its second input.
  auto op = [](const Tensor& a, const Tensor& b) {
    Tensor y = add(a.detach(), b.detach());
    return record("two_inputs", {a, b}, y, [](const Tensor& gy) {
      return grads{gy, full(gy.shape(), INFINITY)};
    });
  };
  Tensor a = leaf({2}, 1.0, 2.0);
  Tensor constant = ones({2});
  AnomalyMode anomaly;
  BOOST_CHECK_NO_THROW(sum(op(a, constant)).backward());
  Tensor tracked = leaf({2}, 1.0, 2.0);
  BOOST_CHECK_EXCEPTION(sum(op(a, tracked)).backward(), Error,
                        message_has({"op 'two_inputs' produced Inf", "gradient for input 1"}));
}

BOOST_AUTO_TEST_CASE(masks_with_minus_infinity_are_not_anomalies) {
  // Attention blocks scores with -inf on purpose, and softmax maps a fully blocked row to zeros.
  Tensor scores = leaf({2, 3}, -1.0, 1.0);
  Tensor mask = gt(tensor({0, 1, 0, 1, 1, 1}, {2, 3}), 0.5);
  AnomalyMode anomaly;
  Tensor p = softmax(masked_fill(scores, mask, -INFINITY), 1);
  BOOST_CHECK_NO_THROW(sum(mul(p, p)).backward());
  BOOST_CHECK_EQUAL(p.to_vector<double>()[5], 0.0);
}

BOOST_AUTO_TEST_CASE(every_registry_case_runs_clean_under_the_mode) {
  // Valid inputs must never raise a false alarm, forward or backward.
  AnomalyMode anomaly;
  for (const GradcheckCase& c : OpRegistry::global().cases()) {
    if (!OpRegistry::runnable(c)) continue;
    auto inputs = OpRegistry::make_inputs(c);
    try {
      sum(c.fn(inputs)).backward();
    } catch (const Error& e) {
      BOOST_ERROR(c.op << ": " << e.what());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
