// PostAccumulateGradHook: backward calls it once per leaf, only after the leaf's .grad holds
// every contribution of this backward (a leaf used by several ops gets its call after the last).
#include <boost/test/unit_test.hpp>
#include <map>

#include "engine/ops.h"
#include "engine/post_accumulate_grad_hook.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_values;

BOOST_AUTO_TEST_SUITE(post_accumulate_grad_hook)

BOOST_AUTO_TEST_CASE(each_leaf_is_reported_once_with_its_complete_gradient) {
  Tensor a = tensor({1.0, 2.0}).requires_grad_();
  Tensor b = tensor({3.0, -1.0}).requires_grad_();
  Tensor c = tensor({0.5}).requires_grad_();
  // a is used three times, at both ends of the graph
  Tensor y = sum(add(mul(a, a), mul(add(a, b), c)));
  y = add(y, sum(mul(a, 4.0)));
  std::map<TensorImpl*, std::vector<double>> seen;
  std::map<TensorImpl*, int> calls;
  {
    PostAccumulateGradHook hook([&](const Tensor& leaf) {
      ++calls[leaf.impl()];
      seen[leaf.impl()] = leaf.grad().to_vector<double>();  // the gradient at the time of the call
    });
    y.backward();
  }
  BOOST_TEST(calls.size() == 3u);
  for (auto [leaf, n] : calls) BOOST_TEST(n == 1);
  // dy/da = 2a + c + 4, dy/db = c, dy/dc = sum(a + b)
  BOOST_TEST(seen[a.impl()] == (std::vector<double>{2 + 0.5 + 4, 4 + 0.5 + 4}),
             boost::test_tools::per_element());
  BOOST_TEST(seen[b.impl()] == (std::vector<double>{0.5, 0.5}), boost::test_tools::per_element());
  BOOST_TEST(seen[c.impl()] == (std::vector<double>{5.0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(later_layers_are_reported_first) {
  // w2 is used after w1 in the forward pass, so its gradient is complete before w1's
  Tensor w1 = tensor({2.0}).requires_grad_();
  Tensor w2 = tensor({3.0}).requires_grad_();
  Tensor x = tensor({1.5});
  Tensor y = sum(mul(tanh(mul(x, w1)), w2));
  std::vector<TensorImpl*> order;
  {
    PostAccumulateGradHook hook([&](const Tensor& leaf) { order.push_back(leaf.impl()); });
    y.backward();
  }
  BOOST_TEST(order == (std::vector<TensorImpl*>{w2.impl(), w1.impl()}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_hook_ends_with_its_guard_and_grad_calls_none) {
  Tensor w = tensor({2.0}).requires_grad_();
  int calls = 0;
  {
    PostAccumulateGradHook hook([&](const Tensor&) { ++calls; });
    std::vector<Tensor> g = grad(sum(mul(w, w)), {w});  // torch.autograd.grad: no .grad, no hook
    check_values(g[0], {4.0});
    BOOST_TEST(calls == 0);
    sum(w).backward();  // a leaf as the root of its own graph is reported too
    BOOST_TEST(calls == 1);
  }
  sum(mul(w, w)).backward();
  BOOST_TEST(calls == 1);
  check_values(w.grad(), {1.0 + 4.0});
}

BOOST_AUTO_TEST_SUITE_END()
