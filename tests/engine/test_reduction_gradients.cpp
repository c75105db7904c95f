// The CPU's one-pass gradients of amax/amin, of mul's broadcast factor and of both of mul's
// operands (engine/cpu/reduction_gradients.cpp), and mean_amax's one-pass forward and gradient,
// against the formulas composed from ops (Backend's default, which CUDA runs), bit for bit: over
// the layouts CBAM reduces (a contiguous run, inner 1, and a run strided across positions, two
// blocks and a tail), with ties, NaN and infinities, at one and two threads. Then through the ops:
// a plain backward (the kernels) against a create_graph one (the composed ops, recorded).
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::equal_values;
using qkv::testing::tied_values;

namespace {

using Layout = qkv::testing::BlockLayout;
// contiguous runs of 33 and 89 (two vectors and a tail; four, one and a tail), runs across
// positions (two blocks and a tail; one short block), and a tall whole tensor
const Layout kLayouts[] = {{7, 33, 1}, {9, 89, 1}, {3, 5, 1100}, {2, 16, 49}, {1, 4096, 16}};

template <typename Check>
void for_each_case(Check check) {
  qkv::testing::for_each_layout_dtype_and_thread_count(kLayouts, check);
}

int64_t count_nan(const Tensor& t) {
  int64_t n = 0;
  for (double v : t.to_vector<double>()) n += std::isnan(v);
  return n;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(reduction_gradients)

BOOST_AUTO_TEST_CASE(extreme_backward_kernel_gives_the_composed_formulas_bits) {
  manual_seed(31);
  Backend& cpu = backend_for(Device::cpu());
  for_each_case([&](const Layout& l, DType dtype) {
    for (bool is_max : {true, false}) {
      BOOST_TEST_CONTEXT((is_max ? "amax" : "amin")) {
        Tensor x = tied_values(l, dtype);
        Tensor kept = (is_max ? amax(x, {1}) : amin(x, {1})).contiguous();
        Tensor gy = randn({l.outer, l.inner}, {.dtype = dtype});
        Tensor fused = Tensor::empty(x.shape(), dtype), composed = Tensor::empty(x.shape(), dtype);
        cpu.extreme_backward(x, kept, gy, fused);
        cpu.Backend::extreme_backward(x, kept, gy, composed);
        BOOST_TEST(equal_values(fused, composed));
        // the cases are there: shared maxima (more hits than runs) and a NaN run
        const double hits = sum(ne(fused, zeros_like(fused)).to(DType::f64)).item();
        BOOST_TEST(hits > double(l.outer * l.inner - 1 + l.reduced));
        BOOST_TEST(count_nan(fused) == l.reduced);
      }
    }
  });
}

BOOST_AUTO_TEST_CASE(mean_amax_kernels_give_the_composed_formulas_bits) {
  manual_seed(34);
  Backend& cpu = backend_for(Device::cpu());
  for_each_case([&](const Layout& l, DType dtype) {
    Tensor x = tied_values(l, dtype);
    Tensor out = Tensor::empty({l.outer, 2, l.inner}, dtype);
    Tensor composed_out = Tensor::empty({l.outer, 2, l.inner}, dtype);
    cpu.mean_amax(x, out);
    cpu.Backend::mean_amax(x, composed_out);
    BOOST_TEST(equal_values(out, composed_out));
    // the means are there, not only the maxima: not one of them is its run's maximum
    BOOST_TEST(!equal_values(select(out, 1, 0), select(out, 1, 1)));
    // and sums whose rounding depends on their order (tied_values' integers add up exactly)
    Tensor spread = mul(randn(x.shape(), {.dtype = dtype}), 1e3);
    Tensor spread_out = Tensor::empty(out.shape(), dtype),
           spread_composed = Tensor::empty(out.shape(), dtype);
    cpu.mean_amax(spread, spread_out);
    cpu.Backend::mean_amax(spread, spread_composed);
    BOOST_TEST(equal_values(spread_out, spread_composed));
    Tensor gy = randn({l.outer, 2, l.inner}, {.dtype = dtype});
    Tensor fused = Tensor::empty(x.shape(), dtype), composed = Tensor::empty(x.shape(), dtype);
    cpu.mean_amax_backward(x, out, gy, fused);
    cpu.Backend::mean_amax_backward(x, out, gy, composed);
    BOOST_TEST(equal_values(fused, composed));
    BOOST_TEST(count_nan(fused) == l.reduced);  // the NaN run's, as amax's gradient
    // added into a sum (the backward sweep's, autograd.h): sum + gradient, as add gives it
    Tensor sum = randn(x.shape(), {.dtype = dtype});
    Tensor fused_into = sum.clone(), composed_into = sum.clone();
    cpu.mean_amax_backward(x, out, gy, fused_into, true);
    cpu.Backend::mean_amax_backward(x, out, gy, composed_into, true);
    BOOST_TEST(equal_values(fused_into, add(sum, fused)));
    BOOST_TEST(equal_values(composed_into, add(sum, fused)));
  });
}

// Runs whose maximum is a zero, held as -0 in some places and +0 in others: which one a run's
// maximum is depends on the order of the comparisons, and the one-pass kernel keeps amax's.
BOOST_AUTO_TEST_CASE(mean_amax_keeps_amaxs_signed_zero) {
  manual_seed(37);
  Backend& cpu = backend_for(Device::cpu());
  for (const Layout& l : {Layout{64, 200, 1}, Layout{8, 16, 300}}) {
    std::vector<double> v =
        randn({l.outer, l.reduced, l.inner}, {.dtype = DType::f64}).to_vector<double>();
    for (double& e : v) e = e < -0.5 ? -1.0 : e < 0.5 ? -0.0 : 0.0;
    Tensor x = tensor(v, {l.outer, l.reduced, l.inner});
    Tensor out = Tensor::empty({l.outer, 2, l.inner}),
           composed = Tensor::empty({l.outer, 2, l.inner});
    cpu.mean_amax(x, out);
    cpu.Backend::mean_amax(x, composed);
    BOOST_TEST(equal_values(out, composed));
    // both signs are among the maxima, so the order was tested
    const std::vector<double> maxima = select(out, 1, 1).to_vector<double>();
    BOOST_TEST(
        std::count_if(maxima.begin(), maxima.end(), [](double m) { return std::signbit(m); }) > 0);
    BOOST_TEST(
        std::count_if(maxima.begin(), maxima.end(), [](double m) { return !std::signbit(m); }) > 0);
  }
}

// The op against mean and amax themselves: its values are theirs side by side, and its gradient
// (the kernel, or the composed formula with create_graph) is the sum of theirs, bit for bit.
BOOST_AUTO_TEST_CASE(mean_amax_is_mean_and_amax_side_by_side) {
  manual_seed(35);
  for (DType dtype : {DType::f32, DType::f64})
    for (const std::vector<int>& dims : {std::vector<int>{2, 3}, std::vector<int>{1}}) {
      BOOST_TEST_CONTEXT(dtype_name(dtype) << " dims " << dims.front() << ".." << dims.back()) {
        Tensor x = tied_values({2, 6, 35}, dtype).reshape({2, 6, 5, 7}).requires_grad_();
        Tensor pair = mean_amax(x, dims);
        Shape shape = x.shape();
        shape.erase(shape.begin() + dims.front(), shape.begin() + dims.back());
        shape[size_t(dims.front())] = 2;
        BOOST_TEST(pair.shape() == shape);
        BOOST_TEST(equal_values(select(pair, dims.front(), 0), mean(x, dims)));
        BOOST_TEST(equal_values(select(pair, dims.front(), 1), amax(x, dims)));
        // r needs a gradient, so that create_graph records gx's dependence on it
        Tensor r = randn(pair.shape(), {.dtype = dtype}).requires_grad_();
        Tensor r_mean = select(r, dims.front(), 0), r_max = select(r, dims.front(), 1);
        const Tensor separate =
            grad(add(sum(mul(mean(x, dims), r_mean)), sum(mul(amax(x, dims), r_max))), {x})[0];
        const Tensor kernel = grad(sum(mul(mean_amax(x, dims), r)), {x})[0];
        const Tensor recorded =
            grad(sum(mul(mean_amax(x, dims), r)), {x}, Tensor(), false, true)[0];
        BOOST_TEST(bool(recorded.grad_fn()));
        BOOST_TEST(equal_values(kernel, separate));
        BOOST_TEST(equal_values(recorded.detach(), separate));
      }
    }
  BOOST_CHECK_THROW(mean_amax(zeros({2, 3, 4}), {0, 2}), Error);  // not adjacent
  BOOST_CHECK_THROW(mean_amax(zeros({2, 0, 4}), {1}), Error);     // nothing to reduce
}

BOOST_AUTO_TEST_CASE(product_sum_kernel_gives_the_composed_formulas_bits) {
  manual_seed(32);
  Backend& cpu = backend_for(Device::cpu());
  for_each_case([&](const Layout& l, DType dtype) {
    Tensor a = randn({l.outer, l.reduced, l.inner}, {.dtype = dtype});
    Tensor b = randn({l.outer, l.reduced, l.inner}, {.dtype = dtype});
    Tensor fused = Tensor::empty({l.outer, l.inner}, dtype);
    Tensor composed = Tensor::empty({l.outer, l.inner}, dtype);
    cpu.product_sum(a, b, fused);
    cpu.Backend::product_sum(a, b, composed);
    BOOST_TEST(equal_values(fused, composed));
  });
}

BOOST_AUTO_TEST_CASE(mul_gradients_kernel_gives_the_composed_formulas_bits) {
  manual_seed(36);
  Backend& cpu = backend_for(Device::cpu());
  for_each_case([&](const Layout& l, DType dtype) {
    Tensor gy = randn({l.outer, l.reduced, l.inner}, {.dtype = dtype});
    Tensor full = randn({l.outer, l.reduced, l.inner}, {.dtype = dtype});
    Tensor factor = randn({l.outer, l.inner}, {.dtype = dtype});
    Tensor fused_full = Tensor::empty(gy.shape(), dtype),
           composed_full = Tensor::empty(gy.shape(), dtype);
    Tensor fused_factor = Tensor::empty(factor.shape(), dtype),
           composed_factor = Tensor::empty(factor.shape(), dtype);
    cpu.mul_gradients(gy, full, factor, fused_full, fused_factor);
    cpu.Backend::mul_gradients(gy, full, factor, composed_full, composed_factor);
    BOOST_TEST(equal_values(fused_full, composed_full));
    BOOST_TEST(equal_values(fused_factor, composed_factor));
    // and the default is mul's broadcast product and product_sum's sum
    BOOST_TEST(equal_values(composed_full, mul(gy, factor.reshape({l.outer, 1, l.inner}))));
    BOOST_TEST(equal_values(composed_factor, sum(mul(gy, full), {1})));
  });
}

// CBAM's pattern: channel weights [B, C, 1, 1] and a spatial map [B, 1, H, W] multiplied in, the
// maxima over H, W and over C. A plain backward runs the kernels, a create_graph one the ops.
BOOST_AUTO_TEST_CASE(amax_and_mul_gradients_are_the_same_with_and_without_create_graph) {
  manual_seed(33);
  for (DType dtype : {DType::f32, DType::f64}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Tensor x = tied_values({2 * 6, 5, 7}, dtype).reshape({2, 6, 5, 7}).requires_grad_();
      Tensor cw = randn({2, 6, 1, 1}, {.dtype = dtype}).requires_grad_();
      Tensor sw = randn({2, 1, 5, 7}, {.dtype = dtype}).requires_grad_();
      Tensor r1 = randn({2, 6}, {.dtype = dtype}), r2 = randn({2, 5, 7}, {.dtype = dtype});
      auto loss = [&] {
        Tensor y = mul(mul(x, cw), sw);
        return add(sum(mul(amax(y, {2, 3}), r1)), sum(mul(amax(y, {1}), r2)));
      };
      const std::vector<Tensor> inputs = {x, cw, sw};
      const std::vector<Tensor> plain = grad(loss(), inputs);
      const std::vector<Tensor> recorded = grad(loss(), inputs, Tensor(), false, true);
      for (size_t i = 0; i < inputs.size(); ++i) {
        BOOST_TEST_CONTEXT("input " << i) {
          BOOST_TEST(bool(recorded[i].grad_fn()));  // the composed ops were recorded
          BOOST_TEST(equal_values(plain[i], recorded[i].detach()));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
