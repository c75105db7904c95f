// Next-token sampling: each filter against distributions computed by hand, the draws against
// their probabilities, and KV-cached generation against recomputing the prefix.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "train/sampling.h"

using namespace qkv;
using namespace qkv::train;

namespace {

void check_probabilities(const std::vector<double>& got, const std::vector<double>& want) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_CHECK_MESSAGE(std::abs(got[i] - want[i]) < 1e-12,
                        "p[" << i << "] = " << got[i] << ", want " << want[i]);
}

// Logits whose softmax is exactly `p` (up to a constant): log p.
std::vector<double> logits_of(const std::vector<double>& p) {
  std::vector<double> l;
  for (double x : p) l.push_back(std::log(x));
  return l;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sampling)

BOOST_AUTO_TEST_CASE(temperature_scales_the_logits) {
  // softmax([0, ln 2, ln 4] / 0.5) = softmax([0, ln 4, ln 16]) = [1, 4, 16] / 21.
  std::vector<double> l = {0, std::log(2.0), std::log(4.0)};
  check_probabilities(next_token_probabilities(l, {.temperature = 0.5}),
                      {1 / 21.0, 4 / 21.0, 16 / 21.0});
  check_probabilities(next_token_probabilities(l, {.temperature = 1}), {1 / 7.0, 2 / 7.0, 4 / 7.0});
  // Temperature 0: greedy, the lowest id among equal maxima.
  check_probabilities(next_token_probabilities({1, 3, 3, 2}, {.temperature = 0}), {0, 1, 0, 0});
}

BOOST_AUTO_TEST_CASE(top_k_keeps_the_k_largest_renormalized) {
  std::vector<double> l = logits_of({0.1, 0.4, 0.2, 0.3});
  check_probabilities(next_token_probabilities(l, {.top_k = 2}), {0, 4 / 7.0, 0, 3 / 7.0});
  check_probabilities(next_token_probabilities(l, {.top_k = 1}), {0, 1, 0, 0});
  check_probabilities(next_token_probabilities(l, {.top_k = 10}), {0.1, 0.4, 0.2, 0.3});
  // Equal logits: exactly k are kept, the lower ids.
  // (Filled element by element: GCC 12.2 at -O3 -march=native built {0.5, 0.5, 0, 0} here as
  // four 0.5s.)
  const std::vector<double> ties = {1, 1, 1, 0};
  std::vector<double> two_lowest_ids(4, 0.0);
  two_lowest_ids[0] = two_lowest_ids[1] = 0.5;
  check_probabilities(next_token_probabilities(ties, {.top_k = 2}), two_lowest_ids);
}

BOOST_AUTO_TEST_CASE(top_p_keeps_the_smallest_set_reaching_p) {
  std::vector<double> l = logits_of({0.1, 0.4, 0.2, 0.3});
  // Ranked 0.4, 0.3, 0.2, 0.1. p = 0.5: 0.4 < 0.5, 0.4 + 0.3 >= 0.5 -> {0.4, 0.3}.
  check_probabilities(next_token_probabilities(l, {.top_p = 0.5}), {0, 4 / 7.0, 0, 3 / 7.0});
  // A token is kept while the mass ranked before it is below p (as HF's TopPLogitsWarper).
  check_probabilities(next_token_probabilities(l, {.top_p = 0.69}), {0, 4 / 7.0, 0, 3 / 7.0});
  check_probabilities(next_token_probabilities(l, {.top_p = 0.71}), {0, 4 / 9.0, 2 / 9.0, 3 / 9.0});
  check_probabilities(next_token_probabilities(l, {.top_p = 0.3}), {0, 1, 0, 0});
  // After top-k: nucleus of the renormalized {0.4, 0.3, 0.2} / 0.9, p = 0.6: 0.444 + 0.333.
  check_probabilities(next_token_probabilities(l, {.top_k = 3, .top_p = 0.6}),
                      {0, 4 / 7.0, 0, 3 / 7.0});
}

BOOST_AUTO_TEST_CASE(draws_follow_the_probabilities_and_the_seed) {
  std::vector<double> l = logits_of({0.1, 0.4, 0.2, 0.3});
  Generator gen(9);
  std::vector<int> counts(4);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[size_t(sample_token(l, {.top_k = 3}, gen))];
  BOOST_CHECK_EQUAL(counts[0], 0);
  const double want[] = {0, 4 / 9.0, 2 / 9.0, 3 / 9.0};
  for (int i = 1; i < 4; ++i)
    BOOST_CHECK_LT(std::abs(counts[size_t(i)] / double(n) - want[i]), 0.015);
  Generator a(4), b(4);
  for (int i = 0; i < 50; ++i) BOOST_REQUIRE_EQUAL(sample_token(l, {}, a), sample_token(l, {}, b));
  const uint64_t before = a.offset();
  sample_token(l, {.temperature = 0}, a);
  BOOST_CHECK_EQUAL(a.offset(), before);  // greedy draws nothing
}

BOOST_AUTO_TEST_CASE(bad_options_name_the_option) {
  std::vector<double> l = {0, 1};
  BOOST_CHECK_THROW(next_token_probabilities(l, {.temperature = -1}), Error);
  BOOST_CHECK_THROW(next_token_probabilities(l, {.top_k = -2}), Error);
  BOOST_CHECK_THROW(next_token_probabilities(l, {.top_p = 0}), Error);
  try {
    next_token_probabilities(l, {.top_p = 1.5});
    BOOST_FAIL("no error");
  } catch (const Error& e) {
    BOOST_CHECK_NE(std::string(e.what()).find("--top-p"), std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(cached_generation_gives_the_tokens_of_recomputation) {
  for (const std::string positions : {"learned", "rope"}) {
    manual_seed(21);
    models::GPT model({.vocab = 13,
                       .context = 24,
                       .d_model = 16,
                       .num_heads = 2,
                       .num_layers = 2,
                       .dim_feedforward = 32,
                       .dropout = 0.1,  // eval mode: off while generating
                       .positions = positions});
    // Larger weights than a fresh init has, so that the draws depend on the tokens and on their
    // positions (learned: the position table; RoPE: sharp attention that matters to the output).
    {
      NoGrad no_grad;
      auto scale = [](const Tensor& t, double by) { copy_(t, mul(t, by)); };
      scale(model.token_embedding->weight, 20.0);
      if (model.position_embedding) scale(model.position_embedding->weight, 20.0);
      for (auto& block : model.blocks->layers) {
        scale(block->self_attn->q_proj->weight, 10.0);
        scale(block->self_attn->k_proj->weight, 10.0);
        scale(block->self_attn->v_proj->weight, 10.0);
        scale(block->self_attn->out_proj->weight, 10.0);
      }
    }
    for (SamplingOptions o : {SamplingOptions{}, SamplingOptions{.temperature = 0},
                              SamplingOptions{.temperature = 0.8, .top_k = 5, .top_p = 0.9}}) {
      Generator g1(77), g2(77);
      // 40 tokens: past the context of 24, where both recompute the last 24.
      std::vector<int64_t> cached = generate(model, {3, 1, 4}, 40, o, g1, true);
      std::vector<int64_t> full = generate(model, {3, 1, 4}, 40, o, g2, false);
      BOOST_CHECK_EQUAL(cached.size(), 43u);
      BOOST_CHECK_MESSAGE(cached == full, positions << ": cached and recomputed tokens differ");
    }
    BOOST_CHECK(model.is_training());  // restored
  }
}

BOOST_AUTO_TEST_SUITE_END()
