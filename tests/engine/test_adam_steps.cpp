// The multi-tensor Adam step (Backend::adam_steps; the CPU's in engine/cpu/adam_kernel.cpp)
// against Adam written out per element in double, each parameter with its own lr, weight decay
// and step count, and bit for bit against adam_step run on each parameter alone. Parameters of
// one element, of one range below the 4096-element grain, of ragged ranges and of several,
// float32 and float64 in one list, Adam and AdamW, at one and two threads.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "engine/backend.h"
#include "engine/ops.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::ThreadCount;

namespace {

constexpr double kBeta1 = 0.9, kBeta2 = 0.99, kEps = 1e-8;

// A parameter with moments from earlier steps (exp_avg_sq positive) and a fresh gradient; its
// group's lr and weight decay and its step count differ from every other parameter's.
Backend::AdamParameter parameter(int64_t n, DType dtype, int k) {
  const TensorOptions o{.dtype = dtype};
  return {randn({n}, o),  randn({n}, o), mul(randn({n}, o), 0.1), mul(rand({n}, o), 0.01),
          0.01 * (k + 1), 0.05 * k,      int64_t(k + 1)};
}

std::vector<Backend::AdamParameter> parameters() {
  std::vector<Backend::AdamParameter> list;
  int k = 0;
  for (int64_t n : {1, 300, 4095, 4097, 20007, 70000})
    list.push_back(parameter(n, DType::f32, k++));
  list.push_back(parameter(3000, DType::f64, k++));
  return list;
}

std::vector<Backend::AdamParameter> copies(const std::vector<Backend::AdamParameter>& list) {
  std::vector<Backend::AdamParameter> out = list;
  for (Backend::AdamParameter& a : out) {
    a.param = a.param.clone();
    a.exp_avg = a.exp_avg.clone();
    a.exp_avg_sq = a.exp_avg_sq.clone();
  }
  return out;
}

// The worst relative difference between the step's new parameter and Adam in double from the
// same inputs (torch's formula: bias-corrected moments, eps outside the square root).
double worst_against_formula(const Backend::AdamParameter& before,
                             const Backend::AdamParameter& after, bool decoupled) {
  const std::vector<double> p = before.param.to_vector<double>(),
                            g = before.grad.to_vector<double>(),
                            m = before.exp_avg.to_vector<double>(),
                            v = before.exp_avg_sq.to_vector<double>(),
                            got = after.param.to_vector<double>();
  const double lr = before.lr, wd = before.weight_decay, t = double(before.step);
  double worst = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    double x = p[i], gi = g[i];
    if (decoupled)
      x *= 1 - lr * wd;
    else
      gi += wd * x;
    const double mi = kBeta1 * m[i] + (1 - kBeta1) * gi;
    const double vi = kBeta2 * v[i] + (1 - kBeta2) * gi * gi;
    const double mh = mi / (1 - std::pow(kBeta1, t)), vh = vi / (1 - std::pow(kBeta2, t));
    x -= lr * mh / (std::sqrt(vh) + kEps);
    worst = std::max(worst, std::abs(got[i] - x) / std::max(1.0, std::abs(x)));
  }
  return worst;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(adam_steps)

BOOST_AUTO_TEST_CASE(each_parameter_takes_its_own_step_as_adam_step_alone_would) {
  manual_seed(11);
  Backend& cpu = backend_for(Device::cpu());
  for (bool decoupled : {false, true})
    for (int threads : {1, 2}) {
      ThreadCount scope(threads);
      const std::vector<Backend::AdamParameter> before = parameters();
      const std::vector<Backend::AdamParameter> listed = copies(before), alone = copies(before);
      cpu.adam_steps(listed, kBeta1, kBeta2, kEps, decoupled);
      for (size_t i = 0; i < before.size(); ++i) {
        const Backend::AdamParameter& a = alone[i];
        cpu.adam_step(a.param, a.grad, a.exp_avg, a.exp_avg_sq, a.lr, kBeta1, kBeta2, kEps,
                      a.weight_decay, decoupled, a.step);
        const double tolerance = before[i].param.dtype() == DType::f32 ? 1e-6 : 1e-13;
        const double worst = worst_against_formula(before[i], listed[i], decoupled);
        BOOST_TEST(worst < tolerance, (decoupled ? "AdamW" : "Adam")
                                          << ", " << threads << " threads, parameter " << i << ": "
                                          << worst);
        BOOST_TEST(same_bits(listed[i].param, a.param), "parameter " << i);
        BOOST_TEST(same_bits(listed[i].exp_avg, a.exp_avg), "exp_avg " << i);
        BOOST_TEST(same_bits(listed[i].exp_avg_sq, a.exp_avg_sq), "exp_avg_sq " << i);
      }
    }
}

BOOST_AUTO_TEST_CASE(the_default_steps_each_parameter_to_the_same_bits) {
  manual_seed(12);
  Backend& cpu = backend_for(Device::cpu());
  const std::vector<Backend::AdamParameter> before = parameters();
  const std::vector<Backend::AdamParameter> kernel = copies(before), composed = copies(before);
  cpu.adam_steps(kernel, kBeta1, kBeta2, kEps, false);
  cpu.Backend::adam_steps(composed, kBeta1, kBeta2, kEps, false);
  for (size_t i = 0; i < before.size(); ++i)
    BOOST_TEST(same_bits(kernel[i].param, composed[i].param), "parameter " << i);
}

BOOST_AUTO_TEST_CASE(a_parameter_of_another_dtype_is_refused_before_any_is_stepped) {
  manual_seed(13);
  Backend& cpu = backend_for(Device::cpu());
  std::vector<Backend::AdamParameter> list = parameters();
  const Tensor first = list[0].param.clone();
  const Tensor b = randn({10}).to(DType::bf16);
  list.push_back({b, b, b, b, 0.01, 0, 1});
  qkv::testing::check_error([&] { cpu.adam_steps(list, kBeta1, kBeta2, kEps, false); },
                            {"adam_step: expected float32 or float64, got bfloat16"});
  BOOST_TEST(same_bits(list[0].param, first));
}

BOOST_AUTO_TEST_SUITE_END()
