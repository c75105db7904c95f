// The vectorizable float exp/sigmoid/erf against libm, and the kernels that use them.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/cpu/vec_math.h"
#include "engine/ops.h"
#include "tests/engine/helpers.h"

using namespace qkv;

BOOST_AUTO_TEST_SUITE(vec_math)

BOOST_AUTO_TEST_CASE(fast_exp_matches_libm) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.01373f) {
    double want = std::exp(double(x));
    worst = std::max(worst, std::abs(cpu::fast_exp(x) - want) / want);
  }
  BOOST_CHECK_LT(worst, 4e-7);  // a few float ulps
  BOOST_CHECK_EQUAL(cpu::fast_exp(-INFINITY), 0.0f);
  BOOST_CHECK_EQUAL(cpu::fast_exp(-100.0f), 0.0f);
  BOOST_CHECK(std::isfinite(cpu::fast_exp(1000.0f)));
}

BOOST_AUTO_TEST_CASE(fast_sigmoid_matches_libm) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.01373f) {
    const double want = 1 / (1 + std::exp(-double(x)));
    worst = std::max(worst, std::abs(cpu::fast_sigmoid(x) - want) / want);
  }
  BOOST_CHECK_LT(worst, 6e-7);  // a few float ulps
  BOOST_CHECK_EQUAL(cpu::fast_sigmoid(-INFINITY), 0.0f);
  BOOST_CHECK_EQUAL(cpu::fast_sigmoid(INFINITY), 1.0f);
  BOOST_CHECK_EQUAL(cpu::fast_sigmoid(0.0f), 0.5f);
  BOOST_CHECK(std::isnan(cpu::fast_sigmoid(NAN)));
}

BOOST_AUTO_TEST_CASE(fast_erf_matches_libm) {
  double worst = 0;
  for (float x = -6.0f; x < 6.0f; x += 0.001f)
    worst = std::max(worst, std::abs(cpu::fast_erf(x) - std::erf(double(x))));
  BOOST_CHECK_LT(worst, 5e-7);  // the fit's 5.5e-8 plus float rounding (~3.5e-7)
}

BOOST_AUTO_TEST_CASE(float_kernels_agree_with_double_ones) {
  manual_seed(4);
  Tensor x = mul(randn({37, 301}, {DType::f64}), 4.0);
  Tensor xf = x.to(DType::f32);
  auto close = [](const Tensor& f, const Tensor& d, double tol) {
    double err = amax(abs(sub(f.to(DType::f64), d))).item();
    BOOST_CHECK_LT(err, tol);
  };
  close(softmax(xf, 1), softmax(x, 1), 1e-6);
  close(log_softmax(xf, 1), log_softmax(x, 1), 1e-5);
  close(gelu(xf), gelu(x), 2e-6);
  close(sigmoid(xf), sigmoid(x), 2e-7);
  close(layer_norm(xf, {301}), layer_norm(x, {301}), 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
