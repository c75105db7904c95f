// Module bookkeeping: dotted names, counts, modes, state_dict round trips and their errors.
#include <boost/test/unit_test.hpp>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "nn/transformer.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::check_error;
using qkv::testing::check_values;

BOOST_AUTO_TEST_SUITE(module)

BOOST_AUTO_TEST_CASE(dotted_names_and_counts) {
  TransformerLayerOptions o;
  o.d_model = 8, o.num_heads = 2, o.dim_feedforward = 16;
  TransformerEncoder enc(o, 2);
  auto named = enc.named_parameters();
  std::vector<std::string> names;
  for (auto& [n, t] : named) names.push_back(n);
  BOOST_CHECK(std::find(names.begin(), names.end(), "layers.1.self_attn.q_proj.weight") !=
              names.end());
  BOOST_CHECK(std::find(names.begin(), names.end(), "layers.0.feed_forward.linear2.bias") !=
              names.end());
  // per layer: 4 projections (8*8 + 8), FFN (8*16 + 16 + 16*8 + 8), two LayerNorms (2 * 16)
  int64_t per_layer = 4 * 72 + (144 + 136) + 32;
  BOOST_CHECK_EQUAL(enc.num_parameters(), 2 * per_layer);
  BOOST_CHECK(enc.summary().find("MultiheadAttention(embed_dim=8, num_heads=2)") !=
              std::string::npos);
}

BOOST_AUTO_TEST_CASE(train_eval_reaches_children) {
  Sequential seq({std::make_shared<Linear>(3, 3), std::make_shared<Dropout>(0.5)});
  seq.eval();
  BOOST_CHECK(!seq[1]->is_training());
  Tensor x = ones({4, 3});
  check_values(seq[1]->forward(x), x.to_vector<double>());  // eval dropout is the identity
  seq.train();
  BOOST_CHECK(seq[1]->is_training());
}

BOOST_AUTO_TEST_CASE(state_dict_round_trip_and_errors) {
  Linear a(4, 3), b(4, 3);
  b.load_state_dict(a.state_dict());
  check_values(b.weight, a.weight.to_vector<double>(), 0);
  // The loaded values are copied into b's own tensors, not aliased to a's.
  BOOST_CHECK(!b.weight.same_storage(a.weight));

  StateDict s = a.state_dict();
  s.erase("bias");
  s["extra"] = zeros({1});
  check_error([&] { b.load_state_dict(s); }, {"missing keys: bias", "unexpected keys: extra"});
  StateDict wrong = a.state_dict();
  wrong["weight"] = zeros({3, 5});
  check_error([&] { b.load_state_dict(wrong); }, {"shape mismatches: weight", "[3,5]", "[3,4]"});
}

BOOST_AUTO_TEST_CASE(buffers_are_in_state_dict_not_parameters) {
  BatchNorm2d bn(3);
  BOOST_CHECK_EQUAL(bn.parameters().size(), 2u);
  auto s = bn.state_dict();
  BOOST_CHECK(s.count("running_mean") && s.count("running_var") && s.count("num_batches_tracked"));
}

// torch.nn.Embedding(padding_idx): the padding row starts at zero and gets no gradient, but the
// forward returns the row as stored, so a checkpoint whose padding row is not zero gives torch's
// output (torch 1.13: Embedding(3, 2, padding_idx=1) with weight[1] = [5, 6] embeds id 1 as [5,
// 6]).
BOOST_AUTO_TEST_CASE(embedding_padding_row_is_returned_as_stored_and_gets_no_gradient) {
  Embedding emb(5, 3, 0);
  check_values(emb.weight.narrow(0, 0, 1), {0, 0, 0}, 0);
  {
    NoGrad no_grad;
    copy_(emb.weight.narrow(0, 0, 1), tensor({5, 6, 7}, {1, 3}));
  }
  Tensor ids = tensor_i64({0, 2, 0, 4}, {2, 2});
  Tensor y = emb.forward(ids);
  check_values(y.narrow(0, 0, 1).narrow(1, 0, 1), {5, 6, 7}, 0);
  check_values(y.narrow(0, 1, 1).narrow(1, 0, 1), {5, 6, 7}, 0);
  check_values(y.narrow(0, 0, 1).narrow(1, 1, 1), emb.weight.narrow(0, 2, 1).to_vector<double>(),
               0);
  sum(mul(y, 3.0)).backward();
  std::vector<double> g = emb.weight.grad().to_vector<double>();
  for (int k = 0; k < 3; ++k) {
    BOOST_CHECK_EQUAL(g[size_t(k)], 0.0);          // padding row, used twice: no gradient
    BOOST_CHECK_EQUAL(g[size_t(2 * 3 + k)], 3.0);  // row 2 used once
    BOOST_CHECK_EQUAL(g[size_t(1 * 3 + k)], 0.0);  // row 1 unused
  }
}

// torch counts a negative padding_idx from the end and refuses one outside [-num, num).
BOOST_AUTO_TEST_CASE(embedding_negative_padding_idx_counts_from_the_end) {
  Embedding emb(4, 2, -1);
  BOOST_REQUIRE(emb.padding_idx.has_value());
  BOOST_CHECK_EQUAL(*emb.padding_idx, 3);
  check_values(emb.weight.narrow(0, 3, 1), {0, 0}, 0);
  BOOST_CHECK(!Embedding(4, 2).padding_idx.has_value());
  check_error([] { Embedding(4, 2, 4); }, {"padding_idx 4 out of range for 4 embeddings"});
  check_error([] { Embedding(4, 2, -5); }, {"padding_idx -5 out of range", "-4 .. 3"});
}

BOOST_AUTO_TEST_CASE(linear_init_matches_pytorch_bounds) {
  Linear l(64, 32);
  double bound = 1 / std::sqrt(64.0);
  BOOST_CHECK_LE(amax(abs(l.weight)).item(), bound);
  BOOST_CHECK_GT(amax(abs(l.weight)).item(), 0.9 * bound);  // 2048 draws fill the range
  BOOST_CHECK_LE(amax(abs(l.bias)).item(), bound);
}

BOOST_AUTO_TEST_CASE(to_float64_keeps_member_handles) {
  Linear l(3, 2);
  std::vector<double> before = l.weight.to_vector<double>();
  l.to(DType::f64);
  BOOST_CHECK(l.weight.dtype() == DType::f64);
  BOOST_CHECK(l.named_parameters()[0].second.dtype() == DType::f64);
  check_values(l.weight, before, 0);
  Tensor y = l.forward(ones({1, 3}, {DType::f64}));
  BOOST_CHECK(y.dtype() == DType::f64);
}

BOOST_AUTO_TEST_CASE(summary_lists_shapes_and_counts) {
  Sequential seq({std::make_shared<Linear>(3, 4), std::make_shared<ReLU>(),
                  std::make_shared<Linear>(4, 2, false)});
  std::string s = seq.summary();
  BOOST_CHECK(s.find("0: Linear(3 -> 4)  [16 params]") != std::string::npos);
  BOOST_CHECK(s.find(".weight [4,3] = 12") != std::string::npos);
  BOOST_CHECK(s.find("2: Linear(4 -> 2, no bias)  [8 params]") != std::string::npos);
  BOOST_CHECK(s.find("total parameters: 24") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(initializers_have_the_promised_spread) {
  Generator gen(77);
  Tensor w = Tensor::empty({200, 300});
  init::xavier_uniform_(w, 1.0, &gen);  // bound sqrt(6 / 500)
  double bound = std::sqrt(6.0 / 500);
  BOOST_CHECK_LE(amax(abs(w)).item(), bound);
  BOOST_CHECK_CLOSE(std::sqrt(var(w).item()), bound / std::sqrt(3.0), 2.0);  // uniform std
  init::kaiming_normal_(w, 0, &gen);  // std sqrt(2 / fan_in) = sqrt(2 / 300)
  BOOST_CHECK_CLOSE(std::sqrt(var(w).item()), std::sqrt(2.0 / 300), 2.0);
  BOOST_CHECK_SMALL(mean(w).item(), 2e-3);
  init::xavier_normal_(w, 2.0, &gen);  // std 2 sqrt(2 / 500)
  BOOST_CHECK_CLOSE(std::sqrt(var(w).item()), 2 * std::sqrt(2.0 / 500), 2.0);
  Tensor conv = Tensor::empty({8, 4, 3, 3});
  BOOST_CHECK_EQUAL(init::fans(conv).fan_in, 36);
  BOOST_CHECK_EQUAL(init::fans(conv).fan_out, 72);
}

BOOST_AUTO_TEST_CASE(dropout_module_scales_kept_values) {
  Dropout d(0.25);
  Tensor y = d.forward(ones({1000}));
  for (double v : y.to_vector<double>()) BOOST_CHECK(v == 0.0 || std::abs(v - 1 / 0.75) < 1e-6);
  double kept = sum(gt(y, 0.0).to(DType::f32)).item();
  BOOST_CHECK(kept > 700 && kept < 800);
  check_error([] { Dropout(1.0); }, {"Dropout", "p must be in [0, 1)"});
}

BOOST_AUTO_TEST_SUITE_END()
