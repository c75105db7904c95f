// choose_attention_kernel, the one place that picks how attention is computed: which kernel each
// kind of request gets, and that each kernel's output equals the composed attention's on the same
// operands; and MultiheadAttention's observer, against the weights and projections computed
// another way.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "nn/attention.h"
#include "nn/decode_attention.h"
#include "nn/efficient_attention.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::bool_mask;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  BOOST_REQUIRE((a.shape() == b.shape()));
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// The request's output from the composed kernel, for comparison.
Tensor composed_output(AttentionRequest r) {
  r.allow_memory_efficient = false;
  BOOST_REQUIRE((choose_attention_kernel(r) == AttentionKernel::composed));
  return compute_attention(r).output;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_kernel)

BOOST_AUTO_TEST_CASE(each_request_gets_its_kernel_and_the_same_output) {
  manual_seed(21);
  const int64_t B = 2, H = 3, S = 7, d = 4;
  const Tensor pad = bool_mask({0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1}, {B, 1, 1, S});
  const Tensor k = randn({B, H, S, d}, {DType::f64}), v = randn({B, H, S, d}, {DType::f64});

  // One query row, key padding, no graph: the single-query kernel.
  {
    NoGrad no_grad;
    AttentionRequest r{randn({B, H, 1, d}, {DType::f64}), k, v, {pad}};
    BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::single_query));
    BOOST_TEST(max_abs_diff(compute_attention(r).output, composed_output(r)) <= 1e-12);
    // the same row with a causal pattern is no single-query step: the tiled kernel
    r.pattern.causal = true;
    BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::fused));
    BOOST_TEST(max_abs_diff(compute_attention(r).output, composed_output(r)) <= 1e-12);
  }

  // Several queries, bool masks, a window: the fused kernel; with a graph, the same.
  const Tensor q = randn({B, H, 5, d}, {DType::f64}).requires_grad_();
  AttentionRequest r{q, k, v, {pad}};
  r.pattern.window = 1;
  BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::fused));
  BOOST_TEST(max_abs_diff(compute_attention(r).output, composed_output(r)) <= 1e-12);
  // a graph wanted rules out the single-query kernel even for one row
  AttentionRequest one_row{q.narrow(2, 0, 1), k, v, {pad}};
  BOOST_TEST((choose_attention_kernel(one_row) == AttentionKernel::fused));

  // Weights wanted, or an additive mask: the composed kernel, which alone gives weights.
  r.need_weights = true;
  BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::composed));
  BOOST_TEST(compute_attention(r).weights.defined());
  r.need_weights = false;
  const Tensor bias = randn({5, S}, {DType::f64});
  r.masks.push_back(bias);
  BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::composed));
  // by hand: blocked keys at -inf (padding or outside the window), the bias added
  const Tensor blocked = logical_or(pad, pattern_mask(r.pattern, 5, S));
  const Tensor scores =
      add(masked_fill(mul(matmul(q, k.transpose(-2, -1)), 0.5), blocked, -INFINITY), bias);
  BOOST_TEST(max_abs_diff(compute_attention(r).output, matmul(softmax(scores, -1), v)) <= 1e-12);
}

BOOST_AUTO_TEST_CASE(observer_sees_the_weights_and_the_projections) {
  manual_seed(22);
  const int64_t B = 2, T = 3, S = 4, E = 6, H = 2;
  MultiheadAttention mha(E, H);
  const Tensor x = randn({B, T, E}), y = randn({B, S, E});
  std::vector<AttentionRecord> seen;
  mha.observer = [&](const AttentionRecord& r) { seen.push_back(r); };
  // need_weights = false: the observer still gets the weights (the composed kernel runs)
  mha.forward(x, y, y, Tensor(), Tensor(), /*need_weights=*/false);
  BOOST_REQUIRE(seen.size() == 1u);
  const AttentionRecord& r = seen[0];
  auto heads = [&](const Tensor& t, int64_t L) {
    return t.reshape({B, L, H, E / H}).transpose(1, 2);
  };
  BOOST_TEST(max_abs_diff(r.q, heads(mha.q_proj->forward(x), T)) <= 1e-6);
  BOOST_TEST(max_abs_diff(r.k, heads(mha.k_proj->forward(y), S)) <= 1e-6);
  BOOST_TEST(max_abs_diff(r.v, heads(mha.v_proj->forward(y), S)) <= 1e-6);
  const Tensor want =
      softmax(mul(matmul(r.q, r.k.transpose(-2, -1)), 1.0 / std::sqrt(double(E / H))), -1);
  BOOST_TEST(max_abs_diff(r.weights, want) <= 1e-6);
  BOOST_TEST(!r.weights.requires_grad());
  // without an observer nothing is handed out
  mha.observer = nullptr;
  mha.forward(x, y, y);
  BOOST_TEST(seen.size() == 1u);
}

// A problem no kernel of the backend takes is refused naming the op, the backend and the dtype.
BOOST_AUTO_TEST_CASE(problems_the_backend_refuses) {
  const Tensor q = zeros({1, 2, 1, 4}, {DType::i64}), k = zeros({1, 2, 3, 4}, {DType::i64});
  BOOST_TEST(!efficient_attention_supported(q, k, k, {}));
  qkv::testing::check_error(
      [&] { efficient_attention(q, k, k); },
      {"efficient_attention", "cpu backend has no fused attention for int64"});
  qkv::testing::check_error(
      [&] { decode_attention(q, k, k); },
      {"decode_attention", "cpu backend has no single-query attention kernel for int64"});
  AttentionRequest r{q, k, k};
  BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::composed));
}

BOOST_AUTO_TEST_SUITE_END()
