// Autograd semantics: accumulation, retain_graph, NoGrad, detach, errors, DOT export.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_error;
using qkv::testing::check_values;
using qkv::testing::equal_values;

BOOST_AUTO_TEST_SUITE(autograd)

BOOST_AUTO_TEST_CASE(chain_rule_by_hand) {
  // y = sum(w * x + exp(w)) -> dy/dw = x + exp(w), dy/dx = w
  Tensor w = tensor({0.5, -1.0}).requires_grad_();
  Tensor x = tensor({2.0, 3.0}).requires_grad_();
  Tensor y = sum(add(mul(w, x), exp(w)));
  y.backward();
  check_values(w.grad(), {2 + std::exp(0.5), 3 + std::exp(-1.0)}, 1e-6);
  check_values(x.grad(), {0.5, -1.0});
}

// relu's gradient is PyTorch's threshold_backward: the incoming gradient where x > 0 and 0 where
// x <= 0, even where that gradient is NaN or inf (a product with a 0/1 mask would give NaN), and
// a NaN x passes it through. torch 1.13: x = [-1, 0, 2, nan], relu(x).backward([nan, inf, nan,
// 1]) gives x.grad = [0, 0, nan, 1]; also on float32, the kernel the step runs.
BOOST_AUTO_TEST_CASE(relu_gradient_is_zero_where_the_input_is_not_positive) {
  const double nan = std::nan(""), inf = INFINITY;
  for (DType dtype : {DType::f64, DType::f32}) {
    Tensor x = tensor({-1.0, 0.0, 2.0, nan}).to(dtype).requires_grad_();
    relu(x).backward(tensor({nan, inf, nan, 1.0}).to(dtype));
    check_values(x.grad(), {0, 0, nan, 1});
  }
}

BOOST_AUTO_TEST_CASE(gradients_accumulate_until_zeroed) {
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  sum(mul(w, w)).backward();
  sum(mul(w, 3.0)).backward();
  check_values(w.grad(), {2 + 3, 4 + 3});
  w.zero_grad();
  BOOST_CHECK(!w.grad().defined());
  sum(w).backward();
  check_values(w.grad(), {1, 1});
}

BOOST_AUTO_TEST_CASE(shared_subexpression_sums_its_gradients) {
  Tensor x = tensor({3.0}).requires_grad_();
  Tensor h = mul(x, x);          // used twice below
  Tensor y = add(h, mul(h, h));  // y = x^2 + x^4
  y.backward();
  check_values(x.grad(), {2 * 3 + 4 * 27});
}

// The sweep adds a node's gradients in place when it alone holds the sum (engine/autograd.cpp).
// add's rule hands one gradient tensor to both its inputs, and reshape's rule a view of it, so
// a and b below may start from the same tensor or the same memory: adding a's second gradient
// into it in place would add it to b's too. For each order of the terms, dx against the sum by
// hand: loss = sum(c1 (a + b) + c2 a + c3 b), a = 3x, b = 5x.
BOOST_AUTO_TEST_CASE(a_gradient_handed_to_two_inputs_is_summed_apart) {
  const std::vector<double> c1 = {0.5, -1.5, 2.0}, c2 = {1.25, 0.75, -3.0}, c3 = {-2.5, 4.0, 1.0};
  const TensorOptions f64 = TensorOptions{}.with(DType::f64);
  std::vector<double> expected;
  for (size_t i = 0; i < c1.size(); ++i)
    expected.push_back(3 * (c1[i] + c2[i]) + 5 * (c1[i] + c3[i]));
  for (bool through_views : {false, true})
    for (int order = 0; order < 3; ++order) {
      Tensor x = tensor({0.1, 0.2, 0.3}, {3}, f64).requires_grad_();
      Tensor a = mul(x, 3.0), b = mul(x, 5.0);
      Tensor s =
          through_views ? reshape(add(reshape(a, {3, 1}), reshape(b, {3, 1})), {3}) : add(a, b);
      Tensor t1 = mul(s, tensor(c1, {3}, f64)), t2 = mul(a, tensor(c2, {3}, f64)),
             t3 = mul(b, tensor(c3, {3}, f64));
      Tensor loss = order == 0   ? sum(add(add(t1, t2), t3))
                    : order == 1 ? sum(add(t2, add(t3, t1)))
                                 : sum(add(add(t3, t1), t2));
      loss.backward();
      BOOST_TEST_CONTEXT("through views " << through_views << ", order " << order)
      check_values(x.grad(), expected, 1e-12);
    }
}

// A rule may add its gradient into the sum of its input's gradients so far, where the sweep holds
// that sum alone (gradient_sum_so_far); mean_amax's does. h below feeds a product and a pool, as
// CBAM's input does. The sweep runs the rules of add's second operand first, so with the pool
// first in the sum the product's gradient is there when the pool's rule runs, and is added to
// without an accumulate_grad event; the other way round the sweep adds the pool's gradient as
// before. Either way dx is that of the two terms alone, added (h = 2 x: the scaling is exact).
BOOST_AUTO_TEST_CASE(a_rule_adds_into_the_sum_the_sweep_offers) {
  manual_seed(41);
  for (DType dtype : {DType::f32, DType::f64})
    for (const std::vector<int>& dims : {std::vector<int>{1}, std::vector<int>{2, 3}})
      for (bool pool_first : {true, false}) {
        Tensor x = randn({3, 4, 5, 6}, {.dtype = dtype}).requires_grad_();
        Tensor w = randn(x.shape(), {.dtype = dtype});
        Shape pooled = x.shape();
        pooled[size_t(dims.front())] = 2;
        if (dims.size() == 2) pooled.erase(pooled.begin() + dims.back());
        Tensor v = randn(pooled, {.dtype = dtype});
        auto product_term = [&](const Tensor& h) { return sum(mul(h, w)); };
        auto pool_term = [&](const Tensor& h) { return sum(mul(mean_amax(h, dims), v)); };
        product_term(mul(x, 2.0)).backward();
        Tensor alone = x.grad().clone();
        x.zero_grad();
        pool_term(mul(x, 2.0)).backward();
        Tensor expected = add(alone, x.grad());
        x.zero_grad();
        Profiler profiler;
        Tensor h = mul(x, 2.0);
        Tensor loss =
            pool_first ? add(pool_term(h), product_term(h)) : add(product_term(h), pool_term(h));
        loss.backward();
        int sums = 0;
        for (const ProfileEvent& e : profiler.events())
          sums += e.name == "accumulate_grad" && e.shapes == shape_str(x.shape());
        BOOST_TEST_CONTEXT(dtype_name(dtype)
                           << ", dims " << dims.size() << ", pool first " << pool_first) {
          BOOST_TEST(equal_values(x.grad(), expected));
          BOOST_TEST(sums == (pool_first ? 0 : 1));
        }
      }
}

BOOST_AUTO_TEST_CASE(second_backward_needs_retain_graph) {
  Tensor x = tensor({2.0}).requires_grad_();
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  check_values(x.grad(), {2 * std::exp(2.0)}, 1e-5);
  check_error([&] { y.backward(); }, {"backward", "second time", "retain_graph"});
}

BOOST_AUTO_TEST_CASE(non_scalar_backward_needs_a_gradient) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = mul(x, 3.0);
  check_error([&] { y.backward(); }, {"backward", "scalar", "[2]"});
  check_error([&] { y.backward(ones({3})); }, {"backward", "[3]", "[2]"});
  y.backward(tensor({1.0, 10.0}));
  check_values(x.grad(), {3, 30});
}

BOOST_AUTO_TEST_CASE(no_grad_and_detach_cut_the_graph) {
  Tensor x = tensor({1.0}).requires_grad_();
  {
    NoGrad guard;
    Tensor y = mul(x, 2.0);
    BOOST_CHECK(!y.requires_grad());
    BOOST_CHECK(!grad_enabled());
  }
  BOOST_CHECK(grad_enabled());
  Tensor z = mul(x.detach(), 2.0);
  BOOST_CHECK(!z.requires_grad());
  check_error([&] { sum(z).backward(); }, {"backward", "does not require grad"});
  // requires_grad propagates
  Tensor c = ones({1});
  BOOST_CHECK(add(c, x).requires_grad());
  BOOST_CHECK(!add(c, c).requires_grad());
}

BOOST_AUTO_TEST_CASE(grad_function_leaves_dot_grad_alone) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = sum(pow(x, 3.0));
  auto g = grad(y, {x});
  check_values(g[0], {3, 12});
  BOOST_CHECK(!x.grad().defined());
}

BOOST_AUTO_TEST_CASE(double_backward_through_composed_rules) {
  // d/dx of (dy/dx) for y = x^3: dy/dx = 3x^2, d2y/dx2 = 6x
  Tensor x = tensor({2.0}, {}, {DType::f64}).requires_grad_();
  Tensor y = sum(pow(x, 3.0));
  auto g = grad(y, {x}, Tensor(), true, /*create_graph=*/true);
  check_values(g[0], {12});
  auto gg = grad(sum(g[0]), {x});
  check_values(gg[0], {12});
}

BOOST_AUTO_TEST_CASE(dot_export_names_ops_and_leaves) {
  Tensor w = ones({2, 3}, {.requires_grad = true});
  Tensor x = ones({3});
  Tensor loss = sum(relu(matmul(w, x)));
  std::string dot = to_dot(loss);
  for (const char* part : {"digraph", "matmul", "relu", "sum", "leaf [2,3]", "->"})
    BOOST_CHECK_MESSAGE(dot.find(part) != std::string::npos, "DOT lacks " << part << ":\n" << dot);
}

BOOST_AUTO_TEST_CASE(graph_is_freed_after_backward) {
  // the closure of exp holds its output; after backward (no retain) it must be released
  Tensor x = tensor({1.0}).requires_grad_();
  Tensor y = exp(x);
  std::weak_ptr<Node> node = y.grad_fn();
  sum(y).backward();
  BOOST_CHECK(y.grad_fn()->released);
  BOOST_CHECK(!y.grad_fn()->backward);
  y = Tensor();
  BOOST_CHECK(node.expired());  // no reference cycle kept it alive
}

BOOST_AUTO_TEST_SUITE_END()
