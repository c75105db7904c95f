// The bad-input catalogue for the engine's ops: each misuse throws qkv::Error whose message names
// the op and what was wrong with it. Cases already asserted beside the op's values (test_ops.cpp,
// test_tensor.cpp, test_conv.cpp, test_autograd.cpp) are not repeated here; docs/TESTING.md lists
// them all. Empty tensors: each op either computes the right (empty or neutral) result, as
// PyTorch does, or refuses clearly where no value would be right (the max of nothing).
#include <boost/test/unit_test.hpp>
#include <functional>
#include <limits>

#include "engine/backend.h"
#include "engine/ops.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_values;
using qkv::testing::message_has;

namespace {

struct BadCall {
  const char* what;
  std::function<void()> call;
  std::vector<std::string> message;  // fragments the error must contain
};

void check_all(const std::vector<BadCall>& cases) {
  for (const BadCall& c : cases) {
    BOOST_TEST_CONTEXT(c.what) { BOOST_CHECK_EXCEPTION(c.call(), Error, message_has(c.message)); }
  }
}

Tensor bools(const Shape& shape) { return gt(zeros(shape), 0.0); }

}  // namespace

BOOST_AUTO_TEST_SUITE(bad_input)

BOOST_AUTO_TEST_CASE(elementwise_shapes_and_dtypes) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  check_all({
      {"sub", [&] { sub(a, b); }, {"sub", "do not broadcast", "[2,3]", "[4,5]"}},
      {"mul", [&] { mul(a, b); }, {"mul", "do not broadcast"}},
      {"div", [&] { div(a, b); }, {"div", "do not broadcast"}},
      {"maximum", [&] { maximum(a, b); }, {"maximum", "do not broadcast"}},
      {"where",
       [&] {
         where(bools({2, 3}), a, b);
       },
       {"where", "do not broadcast"}},
      {"exp of int64", [&] { exp(tensor_i64({1})); }, {"exp", "float32 or float64", "int64"}},
      {"bool arithmetic", [&] { add(bools({2}), bools({2})); }, {"add", "bool", "to()"}},
      {"integer division by zero",
       [&] {
         div(tensor_i64({6, 7}), tensor_i64({2, 0}));
       },
       {"div", "integer division by zero"}},
  });
  // The kernel itself never traps: 0 for a zero divisor, and lowest / -1 wraps (scalar_math.h).
  const int64_t lowest = std::numeric_limits<int64_t>::lowest();
  Tensor x = tensor_i64({6, 7, lowest, lowest}), y = tensor_i64({2, 0, -1, 1});
  Tensor q = Tensor::empty({4}, DType::i64);
  x.backend().binary(BinaryOp::div, x, y, q);
  BOOST_TEST(q.to_vector<int64_t>() == (std::vector<int64_t>{3, 0, lowest, lowest}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(matmul_operands) {
  check_all({
      {"0-d", [] { matmul(zeros({}), zeros({4})); }, {"matmul", "at least one dim", "[]"}},
      {"1-d", [] { matmul(zeros({3}), zeros({4})); }, {"matmul", "inner dimensions differ"}},
      {"dtypes",
       [] {
         matmul(zeros({2, 3}), zeros({3, 2}, {DType::f64}));
       },
       {"matmul", "float32", "float64"}},
      {"int64",
       [] {
         matmul(zeros({2, 3}, {DType::i64}), zeros({3, 2}, {DType::i64}));
       },
       {"matmul", "int64"}},
  });
}

BOOST_AUTO_TEST_CASE(reductions_with_bad_dims) {
  Tensor a = zeros({2, 3});
  check_all({
      {"mean", [&] { mean(a, {5}); }, {"mean", "dim 5", "rank 2"}},
      {"mean negative", [&] { mean(a, {-3}); }, {"mean", "dim -3"}},
      {"sum repeated",
       [&] {
         sum(a, {0, 0});
       },
       {"sum", "repeated"}},
      {"var", [&] { var(a, {2}); }, {"var", "dim 2"}},
      {"amax", [&] { amax(a, {2}); }, {"amax", "dim 2"}},
      {"argmax", [&] { argmax(a, 2); }, {"argmax", "dim 2"}},
      {"softmax", [&] { softmax(a, 2); }, {"softmax", "dim 2"}},
      {"log_softmax", [&] { log_softmax(a, -3); }, {"log_softmax", "dim -3"}},
  });
}

BOOST_AUTO_TEST_CASE(views) {
  Tensor a = zeros({2, 3});
  check_all({
      {"view size", [&] { view(a, {4}); }, {"view", "[2,3]", "[4]"}},
      {"reshape negative",
       [&] {
         reshape(a, {-2, 3});
       },
       {"reshape", "-2"}},
      {"permute repeated",
       [&] {
         permute(a, {0, 0});
       },
       {"permute", "repeated"}},
      {"permute rank", [&] { permute(a, {0}); }, {"permute", "1 dims", "rank 2"}},
      {"transpose", [&] { transpose(a, 0, 2); }, {"transpose", "dim 2"}},
      {"narrow", [&] { narrow(a, 1, 2, 2); }, {"narrow", "[2, 4)", "size 3"}},
      {"select", [&] { select(a, 0, 2); }, {"out of bounds", "dim 0 of size 2"}},
      {"expand",
       [&] {
         expand(a, {4, 3});
       },
       {"expand", "[2,3]", "[4,3]"}},
      {"expand fewer dims", [&] { expand(a, {3}); }, {"expand", "fewer dims"}},
      {"unsqueeze", [&] { unsqueeze(a, 4); }, {"unsqueeze", "dim 4"}},
      {"flatten", [&] { flatten(a, 1, 0); }, {"flatten", "start_dim 1", "end_dim 0"}},
  });
}

BOOST_AUTO_TEST_CASE(index_ops_and_embedding) {
  Tensor a = zeros({2, 3});
  check_all({
      {"index_select float", [&] { index_select(a, 0, tensor({0.0})); }, {"int64", "float32"}},
      {"index_select range",
       [&] { index_select(a, 0, tensor_i64({5})); },
       {"index_select", "index 5", "size 2"}},
      {"index_select 2-D",
       [&] {
         index_select(a, 0, tensor_i64({0, 1}, {1, 2}));
       },
       {"index_select", "0-D or 1-D", "[1,2]"}},
      {"gather range",
       [&] {
         gather(a, 1, tensor_i64({0, 7}, {2, 1}));
       },
       {"gather", "index 7"}},
      {"gather dim",
       [&] {
         gather(a, 3, tensor_i64({0, 0}, {2, 1}));
       },
       {"gather", "dim 3"}},
      {"split", [&] { split(a, 0, 0); }, {"split", "split_size", "positive"}},
      {"chunk", [&] { chunk(a, 0, 0); }, {"chunk", "positive"}},
      {"cat nothing", [] { cat({}, 0); }, {"cat", "at least one"}},
      {"cat dtypes",
       [&] {
         cat({a, a.to(DType::f64)}, 0);
       },
       {"cat", "float32", "float64"}},
      {"stack shapes",
       [&] {
         stack({a, zeros({4, 5})}, 0);
       },
       {"stack", "[4,5]", "[2,3]"}},
      {"embedding weight",
       [] { embedding(zeros({3}), tensor_i64({0})); },
       {"embedding", "2-D", "[3]"}},
      // The message names the op the caller used, not the index_select inside it.
      {"embedding range",
       [] {
         embedding(zeros({3, 2}), tensor_i64({100}));
       },
       {"embedding: index 100", "embedding table of size 3"}},
      {"embedding of an empty table",
       [] {
         embedding(zeros({0, 2}), tensor_i64({0}));
       },
       {"embedding: index 0", "size 0"}},
  });
}

BOOST_AUTO_TEST_CASE(conv_and_pool) {
  Tensor w = zeros({2, 3, 3, 3});
  check_all({
      {"conv rank",
       [&] {
         conv2d(zeros({1, 3, 5}), w);
       },
       {"conv2d", "[N, C, H, W]", "[1,3,5]"}},
      {"conv bias",
       [&] {
         conv2d(zeros({1, 3, 5, 5}), w, zeros({3}));
       },
       {"conv2d", "bias", "[3]", "[2]"}},
      {"conv stride 0",
       [&] {
         conv2d(zeros({1, 3, 5, 5}), w, Tensor(), 0);
       },
       {"conv2d", "stride must be positive"}},
      {"conv dtypes",
       [&] {
         conv2d(zeros({1, 3, 5, 5}), w.to(DType::f64));
       },
       {"conv2d", "float32", "float64"}},
      // Used to pass: (2 - 3) / 2 + 1 is 1 in C++, so a window larger than the input "fit".
      {"conv window > input, stride 2",
       [&] {
         conv2d(zeros({1, 3, 2, 2}), w, Tensor(), 2);
       },
       {"conv2d", "kernel 3x3", "does not fit", "[1,3,2,2]"}},
      {"max_pool window > input",
       [] {
         max_pool2d(zeros({1, 1, 2, 2}), 3);
       },
       {"max_pool2d", "does not fit"}},
      {"avg_pool window > input",
       [] {
         avg_pool2d(zeros({1, 1, 2, 2}), 3);
       },
       {"avg_pool2d", "does not fit"}},
      {"max_pool kernel 0",
       [] {
         max_pool2d(zeros({1, 1, 4, 4}), 0);
       },
       {"max_pool2d", "kernel and stride must be positive"}},
      {"max_pool rank",
       [] {
         max_pool2d(zeros({4, 4}), 2);
       },
       {"max_pool2d", "[N, C, H, W]"}},
      {"avg_pool stride 0",
       [] {
         avg_pool2d(zeros({1, 1, 4, 4}), 2, 0);
       },
       {"avg_pool2d"}},
  });
}

BOOST_AUTO_TEST_CASE(loss_targets_and_dtypes) {
  Tensor logits = zeros({2, 3});
  check_all({
      {"float targets",
       [&] {
         cross_entropy(logits, tensor({0.0, 1.0}));
       },
       {"nll_loss", "int64", "float32"}},
      {"negative target",
       [&] {
         cross_entropy(logits, tensor_i64({0, -5}));
       },
       {"nll_loss", "index -5", "classes"}},
      {"target shape",
       [&] {
         nll_loss(logits, tensor_i64({0, 1, 2}));
       },
       {"nll_loss", "target shape [3]", "expected [2]"}},
      {"smoothing",
       [&] {
         cross_entropy(logits, tensor_i64({0, 1}), -100, 1.5);
       },
       {"cross_entropy", "label_smoothing 1.5"}},
      {"int logits",
       [] {
         cross_entropy(zeros({2, 3}, {DType::i64}), tensor_i64({0, 1}));
       },
       {"cross_entropy", "int64"}},
      // Used to say "reshape: cannot reshape [2,0] ... to [-1,0]".
      {"no classes",
       [] {
         cross_entropy(zeros({2, 0}), tensor_i64({0, 0}));
       },
       {"cross_entropy", "[2,0]", "no classes"}},
      {"layer_norm weight dtype",
       [] {
         layer_norm(zeros({2, 4}), {4}, zeros({4}, {DType::f64}));
       },
       {"layer_norm", "float32", "float64"}},
      {"dropout p", [] { dropout(zeros({2}), -0.1); }, {"dropout", "-0.1", "[0, 1]"}},
      {"dropout of integers",
       [] {
         dropout(tensor_i64({1, 2}), 0.5);
       },
       {"dropout", "float32 or float64", "int64"}},
      {"item of empty", [] { zeros({0}).item(); }, {"item", "[0]"}},
      {"negative shape",
       [] {
         zeros({-1, 2});
       },
       {"negative dimension", "[-1,2]"}},
      {"arange step 0", [] { arange(0, 1, 0); }, {"arange", "step"}},
  });
}

BOOST_AUTO_TEST_CASE(devices) {
  // Without a CUDA backend (not compiled, or no GPU) asking for the device is a clear error;
  // with one, mixing devices in an op is.
  if (!has_backend(DeviceKind::cuda)) {
    BOOST_CHECK_EXCEPTION(zeros({2}, {DType::f32, Device::cuda()}), Error,
                          message_has({"cuda:0 is not available"}));
    BOOST_CHECK_EXCEPTION(zeros({2}).to(Device::cuda()), Error,
                          message_has({"cuda:0 is not available"}));
  } else {
    Tensor gpu = zeros({2}, {DType::f32, Device::cuda()});
    BOOST_CHECK_EXCEPTION(add(zeros({2}), gpu), Error,
                          message_has({"add", "different devices", "cpu", "cuda:0"}));
  }
}

BOOST_AUTO_TEST_CASE(empty_tensors_compute_or_refuse_clearly) {
  Tensor e = zeros({0, 3});
  // computed, as PyTorch computes them
  BOOST_CHECK(add(e, ones({3})).shape() == Shape({0, 3}));
  BOOST_CHECK_EQUAL(sum(e).item(), 0.0);  // the sum of nothing
  check_values(sum(e, {0}), {0, 0, 0});
  check_values(matmul(zeros({2, 0}), zeros({0, 4})), std::vector<double>(8, 0.0));
  BOOST_CHECK(matmul(e, zeros({3, 4})).shape() == Shape({0, 4}));
  BOOST_CHECK(softmax(e, 1).shape() == Shape({0, 3}));
  BOOST_CHECK(layer_norm(e, {3}).shape() == Shape({0, 3}));
  BOOST_CHECK(embedding(zeros({3, 2}), Tensor::empty({0}, DType::i64)).shape() == Shape({0, 2}));
  BOOST_CHECK(cat({e, zeros({2, 3})}, 0).shape() == Shape({2, 3}));
  BOOST_CHECK(conv2d(zeros({0, 3, 5, 5}), zeros({2, 3, 3, 3})).shape() == Shape({0, 2, 3, 3}));
  BOOST_CHECK(max_pool2d(zeros({0, 1, 4, 4}), 2).shape() == Shape({0, 1, 2, 2}));
  BOOST_CHECK(amax(e, {1}).shape() == Shape({0}));  // reduces over a non-empty dim
  Tensor x = zeros({0, 3});
  x.requires_grad_();
  sum(mul(x, x)).backward();
  BOOST_CHECK(x.grad().shape() == Shape({0, 3}));
  // refused: no value would be right
  check_all({
      {"mean of nothing", [&] { mean(e); }, {"mean", "empty", "[0,3]"}},
      {"amax of nothing", [&] { amax(e, {0}); }, {"amax", "empty dimension", "[0,3]"}},
      {"argmax of nothing", [&] { argmax(e, 0); }, {"argmax", "empty dimension"}},
      {"var of nothing", [&] { var(e); }, {"var", "got 0"}},
      {"reshape -1 beside 0",
       [&] {
         reshape(e, {-1, 0});
       },
       {"reshape", "[-1,0]"}},
  });
}

BOOST_AUTO_TEST_SUITE_END()
