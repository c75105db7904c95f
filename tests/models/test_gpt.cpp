// GPT: gradcheck of the whole model, GPT-2's initialisation, causality, tied embeddings, and the
// cached decoding step against the full forward over the prefix.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/op_registry.h"
#include "models/gpt.h"
#include "models/gpt_gradcheck_case.h"

using namespace qkv;
using namespace qkv::models;

namespace {

GPTConfig small(const std::string& positions) {
  return GPTConfig{.vocab = 11,
                   .context = 16,
                   .d_model = 16,
                   .num_heads = 4,
                   .num_layers = 2,
                   .dim_feedforward = 32,
                   .dropout = 0,
                   .positions = positions,
                   .tie_embeddings = true};
}

double std_of(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / double(v.size()));
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  BOOST_REQUIRE_EQUAL(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt)

BOOST_AUTO_TEST_CASE(gradcheck_cases_pass_in_float64) {
  OpRegistry registry;
  register_gpt_gradcheck_cases(registry);
  BOOST_REQUIRE_EQUAL(registry.cases().size(), 2u);
  for (const GradcheckCase& c : registry.cases()) {
    GradcheckResult r = OpRegistry::run(c);
    BOOST_CHECK_MESSAGE(r.ok, c.op << ": max abs err " << r.max_abs_err << "; " << r.message);
  }
}

BOOST_AUTO_TEST_CASE(gpt2_initialisation_and_tied_output) {
  manual_seed(3);
  GPTConfig c = small("learned");
  c.vocab = 200, c.d_model = 64, c.num_layers = 4, c.dim_feedforward = 256;
  GPT model(c);
  BOOST_CHECK_CLOSE(std_of(model.token_embedding->weight), 0.02, 5.0);
  BOOST_CHECK_CLOSE(std_of(model.position_embedding->weight), 0.02, 15.0);
  const double residual = 0.02 / std::sqrt(8.0);
  for (auto& block : model.blocks->layers) {
    BOOST_CHECK_CLOSE(std_of(block->self_attn->q_proj->weight), 0.02, 5.0);
    BOOST_CHECK_CLOSE(std_of(block->self_attn->out_proj->weight), residual, 5.0);
    BOOST_CHECK_CLOSE(std_of(block->feed_forward->linear1->weight), 0.02, 5.0);
    BOOST_CHECK_CLOSE(std_of(block->feed_forward->linear2->weight), residual, 5.0);
    BOOST_CHECK_EQUAL(max_abs_diff(block->feed_forward->linear1->bias,
                                   zeros_like(block->feed_forward->linear1->bias)),
                      0.0);
    BOOST_CHECK_EQUAL(
        max_abs_diff(block->self_attn->q_proj->bias, zeros_like(block->self_attn->q_proj->bias)),
        0.0);
  }
  // Tied: no separate output matrix, and the logits are hidden states times the token table.
  BOOST_CHECK(!model.lm_head);
  for (auto& [name, p] : model.named_parameters())
    BOOST_CHECK(name.find("lm_head") == std::string::npos);
  c.tie_embeddings = false;
  GPT untied(c);
  BOOST_CHECK_EQUAL(untied.num_parameters() - model.num_parameters(), 200 * 64);
}

BOOST_AUTO_TEST_CASE(logits_are_causal) {
  for (const std::string positions : {"learned", "rope"}) {
    manual_seed(5);
    GPT model(small(positions));
    NoGrad no_grad;
    Tensor a = tensor_i64({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
    Tensor b = tensor_i64({1, 2, 3, 4, 9, 9, 9, 9}, {1, 8});
    Tensor la = model.forward(a), lb = model.forward(b);
    BOOST_CHECK_EQUAL(max_abs_diff(la.narrow(1, 0, 4), lb.narrow(1, 0, 4)), 0.0);
    BOOST_CHECK_GT(max_abs_diff(la.narrow(1, 4, 1), lb.narrow(1, 4, 1)), 1e-4);
  }
}

BOOST_AUTO_TEST_CASE(cached_step_equals_the_full_forward) {
  for (const std::string positions : {"learned", "rope"}) {
    manual_seed(7);
    GPT model(small(positions));
    model.eval();
    NoGrad no_grad;
    std::vector<int64_t> seq = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3,
                                2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5};
    Tensor ids = tensor_i64(seq, {2, 16});
    Tensor full = model.forward(ids);
    GPT::Cache cache;
    double worst = 0;
    for (int64_t t = 0; t < 16; ++t) {
      Tensor step = model.forward_step(ids.narrow(1, t, 1).contiguous(), t, cache);
      worst = std::max(worst, max_abs_diff(step, full.narrow(1, t, 1)));
    }
    BOOST_TEST_MESSAGE(positions << ": worst |cached - full| " << worst);
    BOOST_CHECK_LT(worst, 1e-5);
    BOOST_CHECK_THROW(model.forward_step(ids.narrow(1, 0, 1).contiguous(), 16, cache), Error);
  }
}

BOOST_AUTO_TEST_CASE(bad_configs_and_inputs_name_the_field) {
  auto message = [](GPTConfig c) {
    try {
      GPT g(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  GPTConfig c = small("learned");
  c.vocab = 0;
  BOOST_CHECK_NE(message(c).find("vocab"), std::string::npos);
  c = small("learned"), c.d_model = 18;
  BOOST_CHECK_NE(message(c).find("num_heads"), std::string::npos);
  c = small("alibi");
  BOOST_CHECK_NE(message(c).find("positions"), std::string::npos);
  manual_seed(1);
  GPT model(small("learned"));
  BOOST_CHECK_THROW(model.forward(zeros({1, 17}, {.dtype = DType::i64})), Error);  // > context
  BOOST_CHECK_THROW(model.forward(zeros({4}, {.dtype = DType::i64})), Error);
}

BOOST_AUTO_TEST_SUITE_END()
