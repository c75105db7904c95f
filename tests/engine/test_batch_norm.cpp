// batch_norm's fused CPU kernels against Backend's composed default (the formula built from
// reductions and broadcast ops), forward and backward, training and eval; a constant channel
// against its closed-form values; the running statistics; and the bad inputs.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_values;
using qkv::testing::message_has;

namespace {

struct Forward {
  Tensor out, mean, var, rstd;
};

// The CPU's fused kernel, or (composed) the Backend default it overrides, on the same inputs.
Forward forward(const Tensor& x, const Tensor& w, const Tensor& b, bool training, bool composed,
                const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor()) {
  const int64_t c = x.size(1);
  Forward f{Tensor::empty(x.shape(), x.dtype()), Tensor::empty({c}, x.dtype()),
            Tensor::empty({c}, x.dtype()), Tensor::empty({c}, x.dtype())};
  if (!training) copy_(f.mean, running_mean), copy_(f.var, running_var);
  Backend& backend = x.backend();
  if (composed)
    backend.Backend::batch_norm(x, w, b, 1e-5, training, f.mean, f.var, f.rstd, f.out);
  else
    backend.batch_norm(x, w, b, 1e-5, training, f.mean, f.var, f.rstd, f.out);
  return f;
}

struct Backward {
  Tensor gx, gw, gb;
};

Backward backward(const Tensor& g, const Tensor& x, const Tensor& w, const Forward& f,
                  bool training, bool composed) {
  Backward r{Tensor::empty(x.shape(), x.dtype()), Tensor::empty({x.size(1)}, x.dtype()),
             Tensor::empty({x.size(1)}, x.dtype())};
  Backend& backend = x.backend();
  if (composed)
    backend.Backend::batch_norm_backward(g, x, w, f.mean, f.rstd, training, r.gx, r.gw, r.gb);
  else
    backend.batch_norm_backward(g, x, w, f.mean, f.rstd, training, r.gx, r.gw, r.gb);
  return r;
}

void check_same(const Tensor& fused, const Tensor& composed, double tol) {
  check_values(fused, composed.to_vector<double>(), tol);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_norm_kernels)

// Odd sizes (no run a multiple of a vector), an offset mean, two threads over the channels.
BOOST_AUTO_TEST_CASE(fused_kernels_match_the_composed_formula) {
  const int threads = num_threads();
  set_num_threads(2);
  manual_seed(5);
  for (DType dtype : {DType::f32, DType::f64}) {
    const TensorOptions o{.dtype = dtype};
    Tensor x = add(mul(randn({6, 5, 7, 9}, o), 3.0), 4.0), g = randn({6, 5, 7, 9}, o);
    Tensor w = randn({5}, o), b = randn({5}, o);
    Tensor rm = randn({5}, o), rv = uniform({5}, 0.5, 2.0, o);
    const double tol = dtype == DType::f32 ? 2e-5 : 1e-12;
    for (bool training : {true, false}) {
      BOOST_TEST_CONTEXT(dtype_name(dtype) << (training ? " training" : " eval")) {
        Forward fused = forward(x, w, b, training, false, rm, rv);
        Forward composed = forward(x, w, b, training, true, rm, rv);
        for (auto [a, c] : {std::pair{fused.out, composed.out},
                            {fused.mean, composed.mean},
                            {fused.var, composed.var},
                            {fused.rstd, composed.rstd}})
          check_same(a, c, tol * 10);
        Backward bf = backward(g, x, w, fused, training, false);
        Backward bc = backward(g, x, w, composed, training, true);
        check_same(bf.gx, bc.gx, tol);
        check_same(bf.gw, bc.gw, tol * 100);  // sums of 378 products
        check_same(bf.gb, bc.gb, tol * 100);
      }
    }
  }
  set_num_threads(threads);
}

// Every value of channel 1 is 3: its mean is 3 and its variance 0, so y is the bias exactly and
// gx = w * (g - mean(g)) / sqrt(eps), with no xhat term.
BOOST_AUTO_TEST_CASE(a_constant_channel_normalizes_to_its_bias) {
  manual_seed(6);
  Tensor x = randn({4, 3, 2, 5});
  copy_(narrow(x, 1, 1, 1), full({4, 1, 2, 5}, 3.0));
  Tensor w = tensor({1.0, 2.0, 0.5}, {3}), b = tensor({0.0, -0.75, 1.0}, {3});
  Tensor g = randn({4, 3, 2, 5});
  Forward f = forward(x, w, b, true, false);
  check_values(narrow(f.out, 1, 1, 1), std::vector<double>(40, -0.75), 0);
  check_values(narrow(f.var, 0, 1, 1), {0.0}, 0);
  Backward r = backward(g, x, w, f, true, false);
  Tensor g1 = narrow(g, 1, 1, 1);
  Tensor expected = mul(sub(g1, mean(g1)), 2.0 / std::sqrt(1e-5));
  check_values(narrow(r.gx, 1, 1, 1), expected.to_vector<double>(), 2e-3);
  check_values(narrow(r.gw, 0, 1, 1), {0.0}, 0);
  check_values(narrow(r.gb, 0, 1, 1), sum(g1).to_vector<double>(), 1e-5);
}

// The op folds the batch's statistics into the running ones (unbiased variance), and eval uses
// them: per channel mean 3, biased variance 3.5, unbiased 14/3.
BOOST_AUTO_TEST_CASE(op_updates_the_running_statistics_and_eval_reads_them) {
  Tensor x = tensor({1, 2, 3, 6}, {2, 1, 2});
  Tensor rm = zeros({1}), rv = ones({1});
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.25, 0.0);
  check_values(y, {-2 / std::sqrt(3.5), -1 / std::sqrt(3.5), 0, 3 / std::sqrt(3.5)}, 1e-6);
  check_values(rm, {0.25 * 3}, 1e-6);
  check_values(rv, {0.75 + 0.25 * 14.0 / 3}, 1e-6);
  Tensor running_var = tensor({4.0}, {1}, {.dtype = DType::f64});  // a different dtype
  Tensor e = batch_norm(tensor({5.0, 1.0}, {2, 1}), tensor({1.0}, {1}), running_var,
                        tensor({3.0}, {1}), tensor({0.5}, {1}), false, 0.1, 0.0);
  check_values(e, {3 * 4 / 2.0 + 0.5, 0.5}, 1e-6);
  check_values(running_var, {4.0}, 0);  // eval leaves it alone
}

BOOST_AUTO_TEST_CASE(bad_inputs_name_the_op_and_what_is_wrong) {
  Tensor x = zeros({2, 3, 4}), c = zeros({3});
  BOOST_CHECK_EXCEPTION(batch_norm(zeros({3}), c, c), Error,
                        message_has({"batch_norm", "[N, C, ...]"}));
  BOOST_CHECK_EXCEPTION(batch_norm(x, c, c, zeros({4})), Error,
                        message_has({"batch_norm", "weight has shape [4], expected [3]"}));
  BOOST_CHECK_EXCEPTION(batch_norm(x, c, zeros({2, 3})), Error,
                        message_has({"batch_norm", "running_var has shape [2,3]"}));
  BOOST_CHECK_EXCEPTION(batch_norm(x, Tensor(), Tensor()), Error,
                        message_has({"batch_norm", "eval mode needs running_mean"}));
  BOOST_CHECK_EXCEPTION(batch_norm(zeros({1, 3, 1}), c, c, Tensor(), Tensor(), true), Error,
                        message_has({"batch_norm", "more than one value per channel"}));
  BOOST_CHECK_EXCEPTION(batch_norm(x, c, c, zeros({3}, {.dtype = DType::f64})), Error,
                        message_has({"batch_norm"}));
}

BOOST_AUTO_TEST_SUITE_END()
