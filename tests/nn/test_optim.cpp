// Optimizer steps against updates computed by hand (torch.optim's documented algorithms written
// out), per-parameter state and parameter groups, schedules against their formulas, gradient
// clipping, and an exact resume from a saved optimizer state (also from the single-group format).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <numbers>

#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/optim.h"
#include "nn/param_groups.h"
#include "nn/positional.h"
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

// The fused float32 step over many elements (the kernel's vector loop, its remainder, several
// threads' ranges) against the update written out per element in double, for Adam's L2 penalty
// and AdamW's decoupled decay.
BOOST_AUTO_TEST_CASE(adam_and_adamw_on_many_float32_elements_follow_the_formula) {
  const qkv::testing::ThreadCount two(2);
  const int64_t n = 40013;  // several 16384-element ranges and a ragged end
  for (bool decoupled : {false, true}) {
    Tensor p = randn({n}).requires_grad_();
    std::vector<double> x = p.to_vector<double>(), m(size_t(n), 0.0), v(size_t(n), 0.0);
    AdamOptions o{.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
    std::unique_ptr<Optimizer> opt;
    if (decoupled)
      opt = std::make_unique<AdamW>(std::vector<Tensor>{p}, 0.01, o);
    else
      opt = std::make_unique<Adam>(std::vector<Tensor>{p}, 0.01, o);
    for (int t = 1; t <= 3; ++t) {
      Tensor g = randn({n});
      p.set_grad(g);
      opt->step();
      const std::vector<double> gv = g.to_vector<double>(), got = p.to_vector<double>();
      double worst = 0;
      for (size_t i = 0; i < size_t(n); ++i) {
        double gi = gv[i];
        if (decoupled)
          x[i] *= 1 - 0.01 * 0.1;
        else
          gi += 0.1 * x[i];
        m[i] = 0.9 * m[i] + 0.1 * gi;
        v[i] = 0.99 * v[i] + 0.01 * gi * gi;
        const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
        x[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
        worst = std::max(worst, std::abs(got[i] - x[i]) / std::max(1.0, std::abs(x[i])));
        x[i] = got[i];  // the next step starts from float32's parameter
      }
      BOOST_TEST(worst < 1e-6, (decoupled ? "AdamW" : "Adam") << " step " << t << ": " << worst);
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
  BOOST_CHECK_EQUAL(opt_b2.step_count(0), 1);
  BOOST_CHECK_EQUAL(opt_b2.lr(), 0.05);
  train_step(b, opt_b2);
  train_step(b, opt_b2);
  check_values(b.weight, a.weight.to_vector<double>(), 0);
  saved.erase("state.0.exp_avg_sq");
  check_error([&] { opt_b2.load_state_dict(saved); }, {"missing key 'state.0.exp_avg_sq'"});
  // Nothing was copied by the failed load: the next step still matches the uninterrupted run.
  train_step(a, opt_a);
  train_step(b, opt_b2);
  check_values(b.weight, a.weight.to_vector<double>(), 0);
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

// torch.optim.Adam keeps state['step'] per parameter: a parameter whose first gradient comes at
// the optimizer's second step gets the bias correction of a first step, 1 - beta^1, so its first
// update is lr * g / (|g| + eps) = lr in size (torch 1.13 gives b = -0.1 here).
BOOST_AUTO_TEST_CASE(adam_counts_steps_per_parameter) {
  for (bool decoupled : {false, true}) {
    Tensor a = param({1.0}), b = param({0.0});
    std::unique_ptr<Optimizer> opt;
    if (decoupled)
      opt = std::make_unique<AdamW>(std::vector<Tensor>{a, b}, 0.1, AdamOptions{});
    else
      opt = std::make_unique<Adam>(std::vector<Tensor>{a, b}, 0.1);
    set_grad(a, {1.0});
    opt->step();  // b has no gradient: skipped, not counted
    BOOST_CHECK_EQUAL(opt->step_count(0), 1);
    BOOST_CHECK_EQUAL(opt->step_count(1), 0);
    check_values(b, {0.0}, 0);
    set_grad(b, {1.0});
    opt->step();
    BOOST_CHECK_EQUAL(opt->step_count(0), 2);
    BOOST_CHECK_EQUAL(opt->step_count(1), 1);
    // t = 1 for b: m = 0.1 g, v = 0.001 g^2, m / (1 - 0.9) = g, v / (1 - 0.999) = g^2.
    check_values(b, {-0.1 * 1.0 / (1.0 + 1e-8)}, 1e-12);
  }
}

// torch.optim.SGD creates a parameter's momentum buffer from its first gradient (buf = g, no
// dampening), whenever that comes; later steps are buf = momentum * buf + (1 - dampening) * g.
BOOST_AUTO_TEST_CASE(sgd_momentum_buffer_starts_at_the_parameters_first_gradient) {
  Tensor c = param({0.0}), d = param({0.0});
  SGD opt({c, d}, 1.0, {.momentum = 0.9, .dampening = 0.5, .weight_decay = 0, .nesterov = false});
  set_grad(c, {1.0});
  opt.step();
  set_grad(d, {1.0});
  opt.step();  // d's first gradient: buf = 1 (torch 1.13: d = -1.0)
  check_values(d, {-1.0}, 1e-12);
  opt.step();  // buf = 0.9 * 1 + 0.5 * 1 = 1.4
  check_values(d, {-1.0 - 1.4}, 1e-12);
  // c: buf 1 at step 1, then 0.9 + 0.5 = 1.4, then 0.9 * 1.4 + 0.5 = 1.76
  check_values(c, {-1.0 - 1.4 - 1.76}, 1e-12);
}

// torch's param_groups: AdamW([{'params': [a]}, {'params': [b], 'lr': 0.5, 'weight_decay': 0}],
// lr=0.1, weight_decay=0.2), each group's update written out with its own lr and decay.
BOOST_AUTO_TEST_CASE(parameter_groups_have_their_own_lr_and_weight_decay) {
  Tensor a = param({1.0}), b = param({2.0});
  AdamW opt(std::vector<ParamGroup>{{.params = {a}}, {.params = {b}, .lr = 0.5, .weight_decay = 0}},
            0.1, {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.2});
  BOOST_REQUIRE_EQUAL(opt.param_groups().size(), 2u);
  BOOST_CHECK_EQUAL(opt.param_groups()[0].lr, 0.1);
  BOOST_CHECK_EQUAL(opt.param_groups()[0].weight_decay, 0.2);
  BOOST_CHECK_EQUAL(opt.param_groups()[1].lr, 0.5);
  BOOST_CHECK_EQUAL(opt.param_groups()[1].weight_decay, 0.0);
  BOOST_CHECK_EQUAL(opt.params().size(), 2u);
  double xa = 1.0, xb = 2.0, ma = 0, va = 0, mb = 0, vb = 0;
  auto adamw = [](double& x, double& m, double& v, double g, double lr, double wd, int t) {
    x *= 1 - lr * wd;
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    x -= lr * (m / (1 - std::pow(0.9, t))) / (std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8);
  };
  for (int t = 1; t <= 3; ++t) {
    // A schedule's factor scales each group's own lr (LambdaLR): 0.1 * f and 0.5 * f.
    const double f = 1.0 / t;
    opt.scale_lr(f);
    BOOST_CHECK_CLOSE(opt.param_groups()[1].lr, 0.5 * f, 1e-12);
    BOOST_CHECK_CLOSE(opt.lr(), 0.1 * f, 1e-12);
    set_grad(a, {0.3 * t});
    set_grad(b, {-0.2 * t});
    opt.step();
    adamw(xa, ma, va, 0.3 * t, 0.1 * f, 0.2, t);
    adamw(xb, mb, vb, -0.2 * t, 0.5 * f, 0.0, t);
    check_values(a, {xa}, 1e-12);
    check_values(b, {xb}, 1e-12);
  }
  // torch 1.13, the same groups under LambdaLR(lambda e: 1 / (e + 1)): a = 0.78552, b = 2.90096.
  BOOST_CHECK_CLOSE(xa, 0.7855212566953017, 1e-9);
  BOOST_CHECK_CLOSE(xb, 2.900962340814686, 1e-9);
}

BOOST_AUTO_TEST_CASE(sgd_groups_decay_by_their_own_weight_decay) {
  Tensor a = param({1.0}), b = param({1.0});
  SGD opt(std::vector<ParamGroup>{{.params = {a}}, {.params = {b}, .lr = 0.5, .weight_decay = 0.0}},
          0.1, {.momentum = 0, .dampening = 0, .weight_decay = 0.3, .nesterov = false});
  set_grad(a, {1.0});
  set_grad(b, {1.0});
  opt.step();
  check_values(a, {1.0 - 0.1 * (1.0 + 0.3 * 1.0)}, 1e-12);
  check_values(b, {1.0 - 0.5 * 1.0}, 1e-12);
}

// Groups, per-parameter counts and buffers survive state_dict -> load_state_dict: the loaded
// optimizer continues exactly as the saved one, whose b started a step later than a.
BOOST_AUTO_TEST_CASE(grouped_state_round_trips) {
  auto make = [](Tensor a, Tensor b) {
    return Adam(std::vector<ParamGroup>{{.params = {a}}, {.params = {b}, .lr = 0.2}}, 0.1);
  };
  Tensor a1 = param({1.0, 2.0}), b1 = param({3.0});
  Adam first = make(a1, b1);
  set_grad(a1, {0.5, -0.5});
  first.step();
  set_grad(b1, {0.25});
  first.step();
  first.param_groups()[1].lr = 0.3;
  StateDict saved = first.state_dict();
  check_values(saved.at("state.0.step"), {2}, 0);
  check_values(saved.at("state.1.step"), {1}, 0);
  check_values(saved.at("param_groups.1.params"), {1}, 0);

  Tensor a2 = param({0.0, 0.0}), b2 = param({0.0});
  {
    NoGrad no_grad;
    copy_(a2, a1);
    copy_(b2, b1);
  }
  Adam second = make(a2, b2);
  second.load_state_dict(saved);
  BOOST_CHECK_EQUAL(second.step_count(0), 2);
  BOOST_CHECK_EQUAL(second.step_count(1), 1);
  BOOST_CHECK_EQUAL(second.param_groups()[1].lr, 0.3);
  BOOST_CHECK_EQUAL(second.param_groups()[1].initial_lr, 0.2);  // the construction's
  for (auto [p, q] : {std::pair{a1, a2}, std::pair{b1, b2}}) {
    set_grad(p, std::vector<double>(size_t(p.numel()), 0.125));
    set_grad(q, std::vector<double>(size_t(q.numel()), 0.125));
  }
  first.step();
  second.step();
  check_values(a2, a1.to_vector<double>(), 0);
  check_values(b2, b1.to_vector<double>(), 0);

  // A state whose groups are laid out otherwise is refused, naming the key.
  Tensor c = param({1.0, 2.0}), d = param({3.0}), e = param({4.0});
  Adam other_groups(std::vector<ParamGroup>{{.params = {c, d}}, {.params = {e}}}, 0.1);
  check_error([&] { other_groups.load_state_dict(saved); },
              {"'param_groups.0.params' holds 1 parameters", "group 0 of this Adam has 2"});
  Adam fewer_groups(std::vector<ParamGroup>{{.params = {c}}}, 0.1);
  check_error([&] { fewer_groups.load_state_dict(saved); },
              {"more than the 1 parameter groups of this Adam"});
  StateDict negative = saved;
  negative["state.1.step"] = tensor_i64({-3}, {1});
  check_error([&] { second.load_state_dict(negative); }, {"'state.1.step' is -3"});
}

// The single-group format (keys "step", "lr", "state.<j>.exp_avg" ...; one global step count, j
// in the order that optimizer got its parameters) still loads: every parameter's count becomes
// the global count, and `legacy_order` maps j to a parameter of a differently grouped optimizer.
BOOST_AUTO_TEST_CASE(a_single_group_state_loads_into_groups) {
  Tensor a1 = param({1.0, 2.0}), b1 = param({3.0});
  AdamW reference({a1, b1}, 0.1, {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
  for (int t = 1; t <= 2; ++t) {
    set_grad(a1, {0.5 * t, -0.5});
    set_grad(b1, {0.25 * t});
    reference.step();
  }
  StateDict now = reference.state_dict();
  StateDict legacy = {{"step", tensor_i64({2}, {1})},
                      {"lr", tensor({0.1}, {1}, {DType::f64})},
                      {"state.0.exp_avg", now.at("state.0.exp_avg")},
                      {"state.0.exp_avg_sq", now.at("state.0.exp_avg_sq")},
                      {"state.1.exp_avg", now.at("state.1.exp_avg")},
                      {"state.1.exp_avg_sq", now.at("state.1.exp_avg_sq")}};

  Tensor a2 = param({0.0, 0.0}), b2 = param({0.0});
  {
    NoGrad no_grad;
    copy_(a2, a1);
    copy_(b2, b1);
  }
  // b first, a second: the legacy indices are not this optimizer's.
  AdamW grouped(std::vector<ParamGroup>{{.params = {b2}}, {.params = {a2}}}, 0.5,
                {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
  check_error([&] { grouped.load_state_dict(legacy); }, {"'state.0.exp_avg' has shape [2]"});
  grouped.load_state_dict(legacy, {a2, b2});
  BOOST_CHECK_EQUAL(grouped.step_count(0), 2);
  BOOST_CHECK_EQUAL(grouped.step_count(1), 2);
  BOOST_CHECK_EQUAL(grouped.lr(), 0.1);
  BOOST_CHECK_EQUAL(grouped.param_groups()[1].lr, 0.1);
  set_grad(a1, {0.5 * 3, -0.5});
  set_grad(b1, {0.25 * 3});
  set_grad(a2, {0.5 * 3, -0.5});
  set_grad(b2, {0.25 * 3});
  reference.step();
  grouped.step();
  check_values(a2, a1.to_vector<double>(), 0);
  check_values(b2, b1.to_vector<double>(), 0);
  check_error(
      [&] {
        grouped.load_state_dict(legacy, {a2, param({0.0})});
      },
      {"parameter 1 of the single-group state's order is not in this AdamW"});
}

// torch.optim's ValueErrors, as qkv::Errors naming the optimizer and the value.
BOOST_AUTO_TEST_CASE(bad_hyper_parameters_and_groups_are_refused) {
  Tensor p = param({1.0});
  check_error([&] { SGD({p}, -0.1); }, {"SGD: invalid learning rate -0.1 (must be >= 0)"});
  check_error([&] { SGD({p}, 0.1, {.momentum = -1, .dampening = 0, .weight_decay = 0}); },
              {"SGD: invalid momentum -1"});
  check_error([&] { SGD({p}, 0.1, {.momentum = 0, .dampening = 0, .weight_decay = -1}); },
              {"SGD: invalid weight_decay -1"});
  check_error([&] { Adam({p}, 0.1, {.beta1 = 1.0, .beta2 = 0.999, .eps = 1e-8}); },
              {"Adam: invalid beta1 1 (must be in [0, 1))"});
  check_error([&] { AdamW({p}, 0.1, {.beta1 = 0.9, .beta2 = -0.5, .eps = 1e-8}); },
              {"AdamW: invalid beta2 -0.5"});
  check_error([&] { Adam({p}, 0.1, {.beta1 = 0.9, .beta2 = 0.999, .eps = -1e-8}); },
              {"Adam: invalid eps"});
  check_error([&] { Adam(std::vector<ParamGroup>{{.params = {p}, .lr = -1.0}}, 0.1); },
              {"Adam: invalid learning rate -1"});
  check_error(
      [&] {
        Adam(std::vector<ParamGroup>{{.params = {p}}, {.params = {p}}}, 0.1);
      },
      {"Adam: parameter 1 (group 1) is already in the optimizer"});
  Adam opt({p}, 0.1);
  check_error([&] { opt.step_count(1); }, {"parameter index 1 out of range for 1"});
}

// torch.optim.AdamW's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01; Adam's
// weight_decay 0; SGD's momentum, dampening and weight_decay 0.
BOOST_AUTO_TEST_CASE(defaults_are_torchs) {
  Tensor p = param({1.0});
  AdamW adamw({p});
  BOOST_CHECK_EQUAL(adamw.lr(), 1e-3);
  BOOST_CHECK_EQUAL(adamw.options.beta1, 0.9);
  BOOST_CHECK_EQUAL(adamw.options.beta2, 0.999);
  BOOST_CHECK_EQUAL(adamw.options.eps, 1e-8);
  BOOST_CHECK_EQUAL(adamw.param_groups()[0].weight_decay, 0.01);
  Adam adam({p});
  BOOST_CHECK_EQUAL(adam.lr(), 1e-3);
  BOOST_CHECK_EQUAL(adam.param_groups()[0].weight_decay, 0.0);
  SGD sgd({p}, 0.1);
  BOOST_CHECK_EQUAL(sgd.options.momentum, 0.0);
  BOOST_CHECK_EQUAL(sgd.param_groups()[0].weight_decay, 0.0);
}

// zero_grad() is torch's zero_grad(set_to_none=True) (torch 2.0's default; 1.13's default fills
// zeros): the gradient is undefined afterwards, so the next step() skips the parameter - no
// decay, no momentum, no count.
BOOST_AUTO_TEST_CASE(zero_grad_sets_gradients_to_none) {
  Tensor p = param({1.0});
  AdamW opt({p}, 0.1);
  set_grad(p, {1.0});
  opt.step();
  std::vector<double> after_one = p.to_vector<double>();
  opt.zero_grad();
  BOOST_CHECK(!p.grad().defined());
  opt.step();
  check_values(p, after_one, 0);
  BOOST_CHECK_EQUAL(opt.step_count(0), 1);
}

// A NaN norm makes every gradient NaN (torch multiplies by clamp(max_norm / (nan + 1e-6), max=1),
// which is NaN), so a non-finite step can never pass unnoticed.
BOOST_AUTO_TEST_CASE(clip_grad_norm_spreads_a_nan_norm) {
  Tensor a = param({1.0}), b = param({1.0});
  set_grad(a, {std::nan("")});
  set_grad(b, {2.0});
  BOOST_CHECK(std::isnan(clip_grad_norm_({a, b}, 1.0)));
  BOOST_CHECK(std::isnan(b.grad().to_vector<double>()[0]));
}

// The AdamW-practice groups: decay on weight matrices only; biases, LayerNorm weights and the
// embedding / position tables (a table tied to an output projection included) without.
BOOST_AUTO_TEST_CASE(weight_decay_groups_exempt_biases_norms_and_tables) {
  struct Tiny : Module {
    std::shared_ptr<Embedding> embed = register_module("embed", std::make_shared<Embedding>(5, 4));
    std::shared_ptr<LearnedPositionalEncoding> pos =
        register_module("pos", std::make_shared<LearnedPositionalEncoding>(4, 8));
    std::shared_ptr<Linear> proj = register_module("proj", std::make_shared<Linear>(4, 4));
    std::shared_ptr<LayerNorm> norm = register_module("norm", std::make_shared<LayerNorm>(4));
    std::shared_ptr<Linear> out = register_module("out", std::make_shared<Linear>(4, 5));
    Tiny() {
      out->set_parameter("weight", embed->weight);
      out->weight = embed->weight;
    }
  } model;
  std::vector<ParamGroup> groups = weight_decay_groups(model, 0.05);
  BOOST_REQUIRE_EQUAL(groups.size(), 2u);
  BOOST_CHECK_EQUAL(groups[0].weight_decay.value(), 0.05);
  BOOST_CHECK_EQUAL(groups[1].weight_decay.value(), 0.0);
  BOOST_CHECK(!groups[0].lr && !groups[1].lr);
  auto names = [&](const ParamGroup& g) {
    std::vector<std::string> out;
    for (const Tensor& t : g.params)
      for (const auto& [name, p] : model.named_parameters())
        if (p.impl() == t.impl()) out.push_back(name);
    return out;
  };
  BOOST_CHECK(names(groups[0]) == std::vector<std::string>{"proj.weight"});
  BOOST_CHECK(names(groups[1]) ==
              (std::vector<std::string>{"embed.weight", "pos.weight", "proj.bias", "norm.weight",
                                        "norm.bias", "out.bias"}));
  AdamW opt(groups, 0.1);
  BOOST_CHECK_EQUAL(opt.params().size(), model.parameters().size());
}

BOOST_AUTO_TEST_CASE(schedule_factor_is_the_lr_multiplier) {
  LrSchedule cos{.kind = "warmup_cosine",
                 .lr = 2.0,
                 .warmup_steps = 10,
                 .total_steps = 110,
                 .min_lr = 0.2,
                 .d_model = 0};
  BOOST_CHECK_CLOSE(cos.factor(5), 0.5, 1e-9);                       // warm-up: 5 / 10
  BOOST_CHECK_CLOSE(cos.factor(60), (0.2 + 1.8 * 0.5) / 2.0, 1e-9);  // halfway down
  LrSchedule zero = cos;
  zero.lr = 0;
  check_error([&] { zero.factor(1); }, {"a factor needs lr > 0"});
}

BOOST_AUTO_TEST_SUITE_END()
