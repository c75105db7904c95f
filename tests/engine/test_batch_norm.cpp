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
                const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor(),
                bool relu = false) {
  const int64_t c = x.size(1);
  Forward f{Tensor::empty(x.shape(), x.dtype()), Tensor::empty({c}, x.dtype()),
            Tensor::empty({c}, x.dtype()), Tensor::empty({c}, x.dtype())};
  if (!training) copy_(f.mean, running_mean), copy_(f.var, running_var);
  Backend& backend = x.backend();
  if (composed)
    backend.Backend::batch_norm(x, w, b, 1e-5, training, f.mean, f.var, f.rstd, f.out, relu);
  else
    backend.batch_norm(x, w, b, 1e-5, training, f.mean, f.var, f.rstd, f.out, relu);
  return f;
}

struct Backward {
  Tensor gx, gw, gb;
};

// relu: the forward ran with relu, and its output masks g (or, in the CPU's float32 kernel, the
// sign recomputed from x, w and b).
Backward backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& b,
                  const Forward& f, bool training, bool composed, bool relu = false) {
  const Tensor relu_output = relu ? f.out : Tensor();
  Backward r{Tensor::empty(x.shape(), x.dtype()), Tensor::empty({x.size(1)}, x.dtype()),
             Tensor::empty({x.size(1)}, x.dtype())};
  Backend& backend = x.backend();
  if (composed)
    backend.Backend::batch_norm_backward(g, x, w, b, f.mean, f.rstd, training, relu_output, r.gx,
                                         r.gw, r.gb);
  else
    backend.batch_norm_backward(g, x, w, b, f.mean, f.rstd, training, relu_output, r.gx, r.gw,
                                r.gb);
  return r;
}

void check_same(const Tensor& fused, const Tensor& composed, double tol) {
  check_values(fused, composed.to_vector<double>(), tol);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_norm_kernels)

// Odd sizes (no run a multiple of a vector), an offset mean, two threads over the channels; with
// and without the fused ReLU (the bias is about as large as the normalized values, so about a
// third of the outputs are clipped).
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
    for (bool training : {true, false})
      for (bool relu : {false, true}) {
        BOOST_TEST_CONTEXT(dtype_name(dtype)
                           << (training ? " training" : " eval") << (relu ? " relu" : "")) {
          Forward fused = forward(x, w, b, training, false, rm, rv, relu);
          Forward composed = forward(x, w, b, training, true, rm, rv, relu);
          for (auto [a, c] : {std::pair{fused.out, composed.out},
                              {fused.mean, composed.mean},
                              {fused.var, composed.var},
                              {fused.rstd, composed.rstd}})
            check_same(a, c, tol * 10);
          if (relu) {  // the mask is exercised: some outputs clipped, most not
            const double clipped = sum(eq(fused.out, 0.0).to(DType::f64)).item();
            BOOST_TEST(clipped > 0.1 * double(x.numel()));
            BOOST_TEST(clipped < 0.9 * double(x.numel()));
          }
          Backward bf = backward(g, x, w, b, fused, training, false, relu);
          Backward bc = backward(g, x, w, b, composed, training, true, relu);
          check_same(bf.gx, bc.gx, tol);
          check_same(bf.gw, bc.gw, tol * 100);  // sums of 378 products
          check_same(bf.gb, bc.gb, tol * 100);
        }
      }
  }
  set_num_threads(threads);
}

// The float32 kernel sums each channel over fixed ranges of images, whatever the thread count,
// and adds the ranges in order: the statistics, the output and the gradients are the same at
// one, two and three threads, element by element. A batch of 37 cuts into 16 uneven ranges; a batch
// of 2 into 2 ranges and blocks of channels, so that two threads have work; runs of 99 and 65
// values end inside a vector. Also within rounding of the composed formula (the fixed split is not
// the composed reductions' order).
BOOST_AUTO_TEST_CASE(fused_kernels_give_the_same_bits_at_any_thread_count) {
  const int threads = num_threads();
  manual_seed(11);
  for (const Shape& shape : {Shape{37, 5, 9, 11}, Shape{2, 7, 13, 5}})
    for (bool relu : {false, true}) {
      BOOST_TEST_CONTEXT("shape " << shape_str(shape) << (relu ? " relu" : "")) {
        Tensor x = add(mul(randn(shape), 3.0), 4.0), g = randn(shape);
        // Channel 0's gradient: values from 2^-30 to 2^30, the second half of the batch the
        // negatives of the first. Its sum (the bias gradient) is 0 exactly, but a sum in double
        // drops the small values it adds to large ones, so what it finds is rounding that
        // depends on the order of the additions.
        std::vector<double> g0(size_t(shape[0] * shape[2] * shape[3]));
        const std::vector<double> normal = randn({int64_t(g0.size())}).to_vector<double>();
        for (size_t i = 0; i < g0.size() / 2; ++i) {
          g0[i] = float(std::ldexp(normal[i], int(i * 7919 % 61) - 30));
          g0[g0.size() - 1 - i] = -g0[i];
        }
        copy_(narrow(g, 1, 0, 1), tensor(g0, {shape[0], 1, shape[2], shape[3]}));
        Tensor w = randn({shape[1]}), b = randn({shape[1]});
        std::vector<std::vector<float>> first;
        for (int t : {1, 2, 3}) {
          set_num_threads(t);
          Forward f = forward(x, w, b, true, false, Tensor(), Tensor(), relu);
          Backward r = backward(g, x, w, b, f, true, false, relu);
          std::vector<std::vector<float>> got;
          for (const Tensor& v : {f.out, f.mean, f.var, f.rstd, r.gx, r.gw, r.gb})
            got.push_back(v.to_vector<float>());
          if (first.empty()) {
            first = got;
            Forward fc = forward(x, w, b, true, true, Tensor(), Tensor(), relu);
            Backward rc = backward(g, x, w, b, fc, true, true, relu);
            check_same(f.out, fc.out, 2e-4);
            check_same(f.var, fc.var, 2e-4);
            auto others = [&](const Tensor& t) {
              return narrow(t, t.dim() == 1 ? 0 : 1, 1, shape[1] - 1);
            };
            check_same(others(r.gx), others(rc.gx), 2e-5);  // channel 0's are 2^30 in size
            check_same(others(r.gw), others(rc.gw), 2e-3);
          } else {
            for (size_t i = 0; i < got.size(); ++i) {
              BOOST_TEST_CONTEXT("result " << i << " at " << t << " threads")
              BOOST_TEST(got[i] == first[i]);  // element by element
            }
          }
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
  Backward r = backward(g, x, w, b, f, true, false);
  Tensor g1 = narrow(g, 1, 1, 1);
  Tensor expected = mul(sub(g1, mean(g1)), 2.0 / std::sqrt(1e-5));
  check_values(narrow(r.gx, 1, 1, 1), expected.to_vector<double>(), 2e-3);
  check_values(narrow(r.gw, 0, 1, 1), {0.0}, 0);
  check_values(narrow(r.gb, 0, 1, 1), sum(g1).to_vector<double>(), 1e-5);
}

// The statistics of channels whose mean is far from zero beside their spread (1e6 and 1e5 with a
// standard deviation of 1 to 2): the variance within float rounding of the double-precision
// two-pass one over the same float values. A one-pass sum of x^2, even in double, loses about
// mean^2 / var times double's rounding here (about 1e-4 relative).
BOOST_AUTO_TEST_CASE(channels_far_from_zero_keep_their_variance) {
  manual_seed(9);
  Tensor x = add(mul(randn({8, 2, 9, 11}), tensor({1.0f, 2.0f}, {1, 2, 1, 1})),
                 tensor({1e6f, -1e5f}, {1, 2, 1, 1}));
  Forward f = forward(x, Tensor(), Tensor(), true, false);
  Tensor x64 = x.to(DType::f64);
  Tensor mean64 = mean(x64, {0, 2, 3});
  Tensor var64 = mean(square(sub(x64, mean64.reshape({1, 2, 1, 1}))), {0, 2, 3});
  const std::vector<double> v = var64.to_vector<double>();
  check_values(f.var, v, 1e-6 * std::max(v[0], v[1]));
  check_values(f.mean, mean64.to_vector<double>(), 0.07);  // float's spacing at 1e6 is 0.0625
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

// An empty batch in eval (PyTorch 1.13 allows it): an empty output, and zero gradients for the
// weight and the bias, which sum over no values.
BOOST_AUTO_TEST_CASE(an_empty_batch_in_eval_gives_zero_parameter_gradients) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const TensorOptions o{.dtype = dtype};
    Tensor x = zeros({0, 3, 4, 4}, o).requires_grad_();
    Tensor w = ones({3}, o).requires_grad_(), b = zeros({3}, o).requires_grad_();
    Tensor y = batch_norm(x, zeros({3}, o), ones({3}, o), w, b, false, 0.1, 1e-5);
    BOOST_TEST(y.numel() == 0);
    sum(y).backward();
    check_values(w.grad(), {0, 0, 0}, 0);
    check_values(b.grad(), {0, 0, 0}, 0);
  }
}

// batch_norm_relu computes relu(batch_norm(...)): the same values bit for bit (the kernel clips
// as relu's does) and the same gradients to rounding (gy masked as relu_backward(gy, y) masks it,
// the sums vectorized apart). In eval a NaN input stays in its place: relu passes the NaN forward
// and its gradient backward, and eval's gx = w * rstd * gy has no x term to turn it into NaN
// (PyTorch 1.13: the gradient at a NaN input of an eval BatchNorm2d is finite).
BOOST_AUTO_TEST_CASE(batch_norm_relu_is_relu_of_batch_norm_bit_for_bit) {
  manual_seed(8);
  for (DType dtype : {DType::f32, DType::f64})
    for (bool training : {true, false}) {
      BOOST_TEST_CONTEXT(dtype_name(dtype) << (training ? " training" : " eval")) {
        const TensorOptions o{.dtype = dtype};
        Tensor x0 = randn({5, 3, 6, 7}, o), g = randn({5, 3, 6, 7}, o);
        Tensor w0 = randn({3}, o), b0 = randn({3}, o);
        Tensor rm = randn({3}, o), rv = uniform({3}, 0.5, 2.0, o);
        if (!training) {  // a NaN at element 10 (channel 0)
          Tensor flat = x0.reshape({-1});
          copy_(narrow(flat, 0, 10, 1), full({1}, std::nan(""), o));
        }
        std::vector<Tensor> grads[2];
        Tensor out[2];
        for (int fused = 0; fused < 2; ++fused) {
          Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
                 b = b0.clone().requires_grad_();
          Tensor m = rm.clone(), v = rv.clone();
          out[fused] = fused ? batch_norm_relu(x, m, v, w, b, training)
                             : relu(batch_norm(x, m, v, w, b, training));
          out[fused].backward(g);
          grads[fused] = {x.grad(), w.grad(), b.grad(), m, v};
        }
        BOOST_TEST(qkv::testing::equal_values(out[1], out[0]));
        const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
        for (size_t i = 0; i < grads[0].size(); ++i)
          BOOST_TEST_CONTEXT("tensor " << i) check_same(grads[1][i], grads[0][i], tol);
        if (!training) {
          BOOST_TEST(std::isnan(out[1].reshape({-1}).to_vector<double>()[10]));
          BOOST_TEST(std::isfinite(grads[1][0].reshape({-1}).to_vector<double>()[10]));
        }
      }
    }
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
  BOOST_CHECK_EXCEPTION(batch_norm_relu(x, c, c, zeros({4})), Error,
                        message_has({"batch_norm_relu", "weight has shape [4], expected [3]"}));
}

BOOST_AUTO_TEST_SUITE_END()
