// Optimizer steps against updates computed by hand, schedules against their formulas, gradient
// clipping, and an exact resume from a saved optimizer state.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <numbers>

#include "nn/linear.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::check_error;
using qkv::testing::check_values;

namespace {

Tensor param(std::vector<double> v) { return tensor(v, {}, {DType::f64}).requires_grad_(); }
void set_grad(Tensor& p, std::vector<double> g) { p.set_grad(tensor(g, {}, {DType::f64})); }

}  // namespace

BOOST_AUTO_TEST_SUITE(optim)

BOOST_AUTO_TEST_CASE(sgd_momentum_weight_decay_by_hand) {
  Tensor p = param({1.0, -2.0});
  SGD opt({p}, 0.1, {.momentum = 0.9, .dampening = 0, .weight_decay = 0.01, .nesterov = false});
  // step 1: g = 0.5 + 0.01*1 = 0.51 ; buf = 0.51 ; p = 1 - 0.051
  set_grad(p, {0.5, 1.0});
  opt.step();
  check_values(p, {1 - 0.1 * 0.51, -2 - 0.1 * (1.0 - 0.02)}, 1e-12);
  // step 2: g = 0.2 + 0.01*p ; buf = 0.9*0.51 + g
  double p1 = 1 - 0.051, g2 = 0.2 + 0.01 * p1, buf = 0.9 * 0.51 + g2;
  set_grad(p, {0.2, 0.0});
  opt.step();
  BOOST_CHECK_CLOSE(p.to_vector<double>()[0], p1 - 0.1 * buf, 1e-10);
}

BOOST_AUTO_TEST_CASE(sgd_nesterov_by_hand) {
  Tensor p = param({1.0});
  SGD opt({p}, 0.5, {.momentum = 0.5, .dampening = 0, .weight_decay = 0, .nesterov = true});
  set_grad(p, {2.0});
  opt.step();  // buf = 2; g = 2 + 0.5*2 = 3; p = 1 - 1.5
  check_values(p, {-0.5}, 1e-12);
  set_grad(p, {1.0});
  opt.step();  // buf = 0.5*2 + 1 = 2; g = 1 + 1 = 2; p = -0.5 - 1
  check_values(p, {-1.5}, 1e-12);
}

BOOST_AUTO_TEST_CASE(adam_and_adamw_by_hand) {
  for (bool decoupled : {false, true}) {
    Tensor p = param({0.5});
    std::unique_ptr<Optimizer> opt;
    AdamOptions o{.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
    if (decoupled)
      opt = std::make_unique<AdamW>(std::vector<Tensor>{p}, 0.01, o);
    else
      opt = std::make_unique<Adam>(std::vector<Tensor>{p}, 0.01, o);
    double x = 0.5, m = 0, v = 0;
    for (int t = 1; t <= 3; ++t) {
      double g = 0.3 * t - 0.4;
      set_grad(p, {g});
      opt->step();
      if (decoupled)
        x *= 1 - 0.01 * 0.1;
      else
        g += 0.1 * x;
      m = 0.9 * m + 0.1 * g;
      v = 0.99 * v + 0.01 * g * g;
      double mh = m / (1 - std::pow(0.9, t)), vh = v / (1 - std::pow(0.99, t));
      x -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
      BOOST_CHECK_CLOSE(p.to_vector<double>()[0], x, 1e-9);
    }
  }
}

BOOST_AUTO_TEST_CASE(resume_from_state_dict_continues_exactly) {
  manual_seed(9);
  Linear a(3, 2);
  Tensor x = randn({4, 3});
  auto train_step = [&](Linear& l, Optimizer& opt) {
    opt.zero_grad();
    sum(square(l.forward(x))).backward();
    opt.step();
  };
  Linear b(3, 2);
  b.load_state_dict(a.state_dict());
  Adam opt_a(a.parameters(), 0.05);
  for (int i = 0; i < 3; ++i) train_step(a, opt_a);
  // b: one step, save everything, load into a fresh optimizer, continue
  Adam opt_b1(b.parameters(), 0.05);
  train_step(b, opt_b1);
  StateDict saved = opt_b1.state_dict();
  Adam opt_b2(b.parameters(), 0.0);
  opt_b2.load_state_dict(saved);
  BOOST_CHECK_EQUAL(opt_b2.steps(), 1);
  BOOST_CHECK_EQUAL(opt_b2.lr(), 0.05);
  train_step(b, opt_b2);
  train_step(b, opt_b2);
  check_values(b.weight, a.weight.to_vector<double>(), 0);
  saved.erase("state.0.exp_avg");
  check_error([&] { opt_b2.load_state_dict(saved); }, {"missing key 'state.0.exp_avg'"});
}

BOOST_AUTO_TEST_CASE(schedules_match_formulas) {
  LrSchedule cos{.kind = "warmup_cosine",
                 .lr = 1.0,
                 .warmup_steps = 10,
                 .total_steps = 110,
                 .min_lr = 0.1,
                 .d_model = 0};
  BOOST_CHECK_CLOSE(cos.at(1), 0.1, 1e-9);
  BOOST_CHECK_CLOSE(cos.at(10), 1.0, 1e-9);
  BOOST_CHECK_CLOSE(cos.at(60), 0.1 + 0.9 * 0.5, 1e-9);  // halfway: cos(pi/2) = 0
  BOOST_CHECK_CLOSE(cos.at(35), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-9);
  BOOST_CHECK_CLOSE(cos.at(500), 0.1, 1e-9);
  LrSchedule lin = cos;
  lin.kind = "warmup_linear";
  BOOST_CHECK_CLOSE(lin.at(35), 0.1 + 0.9 * 0.75, 1e-9);
  LrSchedule noam{.kind = "noam",
                  .lr = 2.0,
                  .warmup_steps = 4000,
                  .total_steps = 0,
                  .min_lr = 0,
                  .d_model = 512};
  BOOST_CHECK_CLOSE(noam.at(100), 2.0 / std::sqrt(512.0) * 100 * std::pow(4000.0, -1.5), 1e-9);
  BOOST_CHECK_CLOSE(noam.at(10000), 2.0 / std::sqrt(512.0) / 100, 1e-9);
  LrSchedule constant;
  BOOST_CHECK_EQUAL(constant.at(7), 1e-3);
  LrSchedule bad{
      .kind = "step", .lr = 1, .warmup_steps = 0, .total_steps = 1, .min_lr = 0, .d_model = 0};
  check_error([&] { bad.at(1); }, {"unknown kind 'step'"});
}

BOOST_AUTO_TEST_CASE(clip_grad_norm_scales_globally) {
  Tensor a = param({3.0}), b = param({0.0, 4.0});
  set_grad(a, {3.0});
  set_grad(b, {0.0, 4.0});
  double norm = clip_grad_norm_({a, b}, 1.0);
  BOOST_CHECK_CLOSE(norm, 5.0, 1e-9);
  check_values(a.grad(), {0.6}, 1e-6);
  check_values(b.grad(), {0.0, 0.8}, 1e-6);
  BOOST_CHECK_CLOSE(clip_grad_norm_({a, b}, 10.0), 1.0, 1e-4);  // below max: unchanged
  check_values(a.grad(), {0.6}, 1e-6);
}

BOOST_AUTO_TEST_SUITE_END()
