// Attention against independent computations: MultiheadAttention redone head by head with plain
// loops over matmul/softmax, masks checked position by position, positional encodings' defining
// properties.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "nn/attention.h"
#include "nn/positional.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::bool_mask;
using qkv::testing::check_error;
using qkv::testing::check_values;

namespace {

// One head of one batch element, written without the module: softmax((q k^T) / sqrt(d) + bias)
// with blocked keys removed by hand.
std::vector<double> reference_row_softmax(const std::vector<double>& scores,
                                          const std::vector<bool>& blocked) {
  double mx = -INFINITY;
  for (size_t j = 0; j < scores.size(); ++j)
    if (!blocked[j]) mx = std::max(mx, scores[j]);
  std::vector<double> w(scores.size(), 0.0);
  double z = 0;
  for (size_t j = 0; j < scores.size(); ++j)
    if (!blocked[j]) z += (w[j] = std::exp(scores[j] - mx));
  for (double& x : w) x = z > 0 ? x / z : 0;
  return w;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention)

BOOST_AUTO_TEST_CASE(multihead_equals_per_head_reference) {
  manual_seed(3);
  const int64_t B = 2, T = 3, S = 4, E = 6, H = 2, D = 3;
  MultiheadAttention mha(E, H);
  Tensor q = randn({B, T, E}), kv = randn({B, S, E});
  Tensor pad = bool_mask({0, 0, 0, 1, 0, 1, 0, 0}, {B, S});
  AttentionOutput a = mha.forward(q, kv, kv, pad, Tensor(), true, false);
  BOOST_REQUIRE(a.weights.shape() == (Shape{B, H, T, S}));

  // Independent: project with explicit x W^T + b, split heads by narrowing columns.
  auto proj = [](const Tensor& x, Linear& l) {
    return add(matmul(x, transpose(l.weight, 0, 1)), l.bias);
  };
  Tensor Q = proj(q, *mha.q_proj), K = proj(kv, *mha.k_proj), V = proj(kv, *mha.v_proj);
  std::vector<double> padv = pad.to_vector<double>();
  std::vector<Tensor> batch_out;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Tensor> head_out;
    for (int64_t h = 0; h < H; ++h) {
      Tensor qh = select(Q, 0, b).narrow(1, h * D, D), kh = select(K, 0, b).narrow(1, h * D, D),
             vh = select(V, 0, b).narrow(1, h * D, D);
      std::vector<double> sc =
          (matmul(qh, transpose(kh, 0, 1)) / std::sqrt(3.0)).to_vector<double>();
      std::vector<double> w;
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> row(sc.begin() + t * S, sc.begin() + (t + 1) * S);
        std::vector<bool> blocked(S);
        for (int64_t s = 0; s < S; ++s) blocked[s] = padv[b * S + s] != 0;
        auto r = reference_row_softmax(row, blocked);
        w.insert(w.end(), r.begin(), r.end());
      }
      check_values(select(select(a.weights, 0, b), 0, h), w, 1e-5);
      head_out.push_back(matmul(tensor(w, {T, S}), vh));
    }
    batch_out.push_back(proj(cat(head_out, 1), *mha.out_proj));
  }
  check_values(a.output, stack(batch_out, 0).to_vector<double>(), 1e-5);
  // averaged weights are the mean over heads
  AttentionOutput avg = mha.forward(q, kv, kv, pad);
  check_values(avg.weights, mean(a.weights, {1}).to_vector<double>(), 1e-6);
}

BOOST_AUTO_TEST_CASE(causal_mask_position_by_position) {
  check_values(causal_mask(3), {0, 1, 1, 0, 0, 1, 0, 0, 0});
  manual_seed(4);
  MultiheadAttention mha(4, 2);
  Tensor x = randn({1, 5, 4});
  AttentionOutput a = mha.forward(x, x, x, {}, {}, true, false, true);
  std::vector<double> w = a.weights.to_vector<double>();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < 5; ++t) {
      double row = 0;
      for (int64_t s = 0; s < 5; ++s) {
        double v = w[size_t((h * 5 + t) * 5 + s)];
        if (s > t)
          BOOST_CHECK_EQUAL(v, 0.0);
        else
          BOOST_CHECK_GT(v, 0.0);
        row += v;
      }
      BOOST_CHECK_CLOSE(row, 1.0, 1e-4);
    }
  // The output at t does not change when later positions change.
  Tensor x2 = cat({x.narrow(1, 0, 3), randn({1, 2, 4})}, 1);
  AttentionOutput b = mha.forward(x2, x2, x2, {}, {}, false, true, true);
  check_values(b.output.narrow(1, 0, 3), a.output.narrow(1, 0, 3).to_vector<double>(), 1e-6);
  // is_causal and an explicit bool mask agree
  AttentionOutput c = mha.forward(x, x, x, {}, causal_mask(5), false);
  check_values(c.output, a.output.to_vector<double>(), 1e-6);
}

BOOST_AUTO_TEST_CASE(fully_masked_row_gives_zeros_not_nan) {
  Tensor q = randn({1, 2, 3}, {.requires_grad = true}), k = randn({1, 3, 3}), v = randn({1, 3, 3});
  Tensor m = bool_mask({1, 1, 1, 0, 1, 0}, {2, 3});
  AttentionOutput a = scaled_dot_product_attention(q, k, v, m);
  check_values(a.weights.narrow(1, 0, 1), {0, 0, 0});
  check_values(a.output.narrow(1, 0, 1), {0, 0, 0});
  sum(a.output).backward();
  for (double g : q.grad().to_vector<double>()) BOOST_CHECK(std::isfinite(g));
  // additive float mask equals the bool mask with -inf
  Tensor additive = where(m, -INFINITY, zeros({}));
  check_values(scaled_dot_product_attention(q, k, v, additive).output, a.output.to_vector<double>(),
               1e-6);
}

BOOST_AUTO_TEST_CASE(padding_keys_get_no_weight_and_do_not_matter) {
  manual_seed(5);
  MultiheadAttention mha(4, 1);
  Tensor q = randn({1, 2, 4}), kv = randn({1, 3, 4});
  Tensor pad = bool_mask({0, 0, 1}, {1, 3});
  AttentionOutput a = mha.forward(q, kv, kv, pad, {}, true, false);
  std::vector<double> w = a.weights.to_vector<double>();
  BOOST_CHECK_EQUAL(w[2], 0.0);
  BOOST_CHECK_EQUAL(w[5], 0.0);
  Tensor kv2 = cat({kv.narrow(1, 0, 2), full({1, 1, 4}, 100.0)}, 1);
  check_values(mha.forward(q, kv2, kv2, pad).output, a.output.to_vector<double>(), 1e-6);
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_clear_errors) {
  check_error([] { MultiheadAttention(10, 3); }, {"MultiheadAttention", "10", "divisible", "3"});
  MultiheadAttention mha(4, 2);
  Tensor x = randn({2, 3, 4});
  check_error(
      [&] {
        mha.forward(x, x, x, zeros({2, 4}).to(DType::b8));
      },
      {"key_padding_mask", "[2,4]"});
  check_error([] { make_positional_encoding("fourier", 8, 16); }, {"unknown encoding 'fourier'"});
}

BOOST_AUTO_TEST_CASE(sinusoidal_values_and_beyond_max_len) {
  Tensor table = sinusoid_table(3, 4);
  // position 2, pair 1: angle 2 / 10000^(2/4) = 0.02
  check_values(table.narrow(0, 2, 1),
               {std::sin(2.0), std::cos(2.0), std::sin(0.02), std::cos(0.02)}, 1e-6);
  SinusoidalPositionalEncoding pe(4, 2);
  Tensor y = pe.forward(zeros({1, 3, 4}));  // 3 > max_len 2 still works
  check_values(y, table.to_vector<double>(), 1e-6);
  LearnedPositionalEncoding learned(4, 2);
  check_error([&] { learned.forward(zeros({1, 3, 4})); }, {"exceed max_len 2"});
}

// A float64 module's sinusoidal table is the formula in float64 (not the float32 buffer widened),
// inside max_len and beyond it: each entry within 1e-15 of std::sin / std::cos in double.
BOOST_AUTO_TEST_CASE(sinusoidal_in_float64_is_float64_accurate) {
  SinusoidalPositionalEncoding pe(6, 4);
  pe.to(DType::f64);
  for (int64_t T : {3, 7}) {  // within max_len 4, and past it
    Tensor y = pe.forward(zeros({1, T, 6}, {DType::f64}));
    BOOST_REQUIRE(y.dtype() == DType::f64);
    std::vector<double> expected;
    for (int64_t p = 0; p < T; ++p)
      for (int64_t i = 0; i < 6; i += 2) {
        double angle = double(p) / std::pow(10000.0, double(i) / 6.0);
        expected.push_back(std::sin(angle));
        expected.push_back(std::cos(angle));
      }
    check_values(y, expected, 1e-15);
  }
}

// torch.nn.MultiheadAttention(64, 4): q, k, v are rows of one in_proj_weight [192, 64],
// Xavier-uniform over it, bound sqrt(6 / (64 + 192)) = 0.1531 (torch 1.13 draws max |w| 0.15308);
// with kdim 32, vdim 16 each projection is Xavier-uniform alone: sqrt(6 / (64 + kdim)).
BOOST_AUTO_TEST_CASE(multihead_attention_init_bounds_are_torchs) {
  auto check_bound = [](const Tensor& w, double bound) {
    const double top = amax(abs(w)).item();
    BOOST_CHECK_LE(top, bound);
    BOOST_CHECK_GT(top, 0.95 * bound);  // >= 1024 draws come close to the edge
  };
  MultiheadAttention packed(64, 4);
  for (const auto& proj : {packed.q_proj, packed.k_proj, packed.v_proj}) {
    check_bound(proj->weight, std::sqrt(6.0 / 256.0));
    BOOST_CHECK_EQUAL(amax(abs(proj->bias)).item(), 0.0);
  }
  check_bound(packed.out_proj->weight, 1 / std::sqrt(64.0));  // Linear's default
  BOOST_CHECK_EQUAL(amax(abs(packed.out_proj->bias)).item(), 0.0);
  MultiheadAttention separate(64, 4, 0.0, true, 32, 16);
  check_bound(separate.q_proj->weight, std::sqrt(6.0 / 128.0));
  check_bound(separate.k_proj->weight, std::sqrt(6.0 / 96.0));
  check_bound(separate.v_proj->weight, std::sqrt(6.0 / 80.0));
}

BOOST_AUTO_TEST_CASE(rope_scores_depend_on_distance_only) {
  RotaryEmbedding rope(4);
  // The same vector at every position: rotated dot products depend only on t - s.
  Tensor v = tensor({0.3, -1.2, 0.7, 0.5}).reshape({1, 4}).expand({6, 4});
  Tensor r = rope.apply(v);
  Tensor s = matmul(r, transpose(r, 0, 1));
  std::vector<double> sc = s.to_vector<double>();
  BOOST_CHECK_CLOSE(sc[1 * 6 + 0], sc[4 * 6 + 3], 1e-3);
  BOOST_CHECK_CLOSE(sc[5 * 6 + 2], sc[3 * 6 + 0], 1e-3);
  // position 0 is not rotated; norms are preserved
  check_values(r.narrow(0, 0, 1), {0.3, -1.2, 0.7, 0.5}, 1e-6);
  check_values(sum(square(r), {1}), std::vector<double>(6, 0.09 + 1.44 + 0.49 + 0.25), 1e-5);
}

BOOST_AUTO_TEST_CASE(alibi_and_relative_bias_values) {
  ALiBi alibi(2);
  Tensor bias = alibi.score_bias(zeros({1, 2, 3, 4}), 4);
  // head 0 slope 2^-4, head 1 slope 2^-8; bias[h, i, j] = -slope |i - j|
  std::vector<double> b = bias.to_vector<double>();
  BOOST_CHECK_CLOSE(b[(0 * 3 + 2) * 4 + 0], -2.0 / 16, 1e-6);
  BOOST_CHECK_CLOSE(b[(1 * 3 + 0) * 4 + 3], -3.0 / 256, 1e-6);

  RelativePositionBias rel(2, 1);  // distances clipped to -1, 0, 1
  rel.weight = tensor({1, 0, 0, 1, 2, 2}, {3, 2});
  Tensor q = tensor({1, 2, 3, 4, 5, 6}, {1, 1, 3, 2});
  std::vector<double> got = rel.score_bias(q, 3).to_vector<double>();
  // score[i][j] = q_i . a[clip(j - i) + 1] / sqrt(2)
  const double s = 1 / std::sqrt(2.0);
  std::vector<double> a_dot_q[3];
  for (int i = 0; i < 3; ++i) {
    double q0 = 2 * i + 1, q1 = 2 * i + 2;
    a_dot_q[i] = {q0 * 1, q1 * 1, 2 * q0 + 2 * q1};  // a[-1] = (1,0), a[0] = (0,1), a[1] = (2,2)
  }
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) expected.push_back(a_dot_q[i][std::clamp(j - i, -1, 1) + 1] * s);
  check_values(tensor(got), expected, 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
