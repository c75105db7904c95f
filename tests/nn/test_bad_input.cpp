// The bad-input catalogue for nn modules: attention masks of the wrong shape or dtype, layers fed
// the wrong width, ids outside a table; each message names the module (or the op the caller
// called) and what was wrong. Valid masked attention, meanwhile, raises no false alarm under
// anomaly mode, and neither does any nn gradcheck case.
#include <boost/test/unit_test.hpp>
#include <functional>

#include "engine/autograd.h"
#include "engine/op_registry.h"
#include "nn/attention.h"
#include "nn/batch_norm.h"
#include "nn/embedding.h"
#include "nn/gradcheck_cases.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::message_has;

namespace {

Tensor bools(const Shape& shape) { return gt(zeros(shape), 0.0); }
Tensor ints(const Shape& shape) { return zeros(shape, {DType::i64}); }

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_bad_input)

BOOST_AUTO_TEST_CASE(attention_masks_of_the_wrong_shape_or_dtype) {
  MultiheadAttention mha(8, 2);
  Tensor x = randn({2, 5, 8});
  BOOST_CHECK_EXCEPTION(mha.forward(zeros({5, 8}), zeros({5, 8}), zeros({5, 8})), Error,
                        message_has({"MultiheadAttention", "batch-first [B, T, E]", "[5,8]"}));
  BOOST_CHECK_EXCEPTION(mha.forward(x, x, x, Tensor(), bools({5, 4})), Error,
                        message_has({"MultiheadAttention", "attn_mask", "[5,5]", "[5,4]"}));
  BOOST_CHECK_EXCEPTION(mha.forward(x, x, x, Tensor(), bools({3, 5, 5})), Error,
                        message_has({"MultiheadAttention", "[B*H, T, S]", "[3,5,5]"}));
  BOOST_CHECK_EXCEPTION(mha.forward(x, x, x, Tensor(), bools({5})), Error,
                        message_has({"MultiheadAttention", "attn_mask", "[5]"}));
  // Used to be reported by scaled_dot_product_attention, which the caller never called.
  BOOST_CHECK_EXCEPTION(mha.forward(x, x, x, ints({2, 5})), Error,
                        message_has({"MultiheadAttention: key_padding_mask", "bool", "int64"}));
  BOOST_CHECK_EXCEPTION(mha.forward(x, x, x, Tensor(), ints({5, 5})), Error,
                        message_has({"MultiheadAttention: attn_mask", "bool", "int64"}));
  // E of the input differs from embed_dim
  Tensor narrow_x = zeros({2, 5, 6});
  BOOST_CHECK_EXCEPTION(mha.forward(narrow_x, narrow_x, narrow_x), Error,
                        message_has({"Linear", "last dim 8", "[2,5,6]"}));
}

BOOST_AUTO_TEST_CASE(scaled_dot_product_attention_masks) {
  Tensor q = randn({2, 5, 8});
  // Used to say "masked_fill: shapes do not broadcast: [2,5,5] and [4,4]".
  BOOST_CHECK_EXCEPTION(
      scaled_dot_product_attention(q, q, q, bools({4, 4})), Error,
      message_has({"scaled_dot_product_attention", "attn_mask of shape [4,4]", "[2,5,5]"}));
  BOOST_CHECK_EXCEPTION(scaled_dot_product_attention(q, q, q, zeros({5, 3})), Error,
                        message_has({"scaled_dot_product_attention", "[5,3]"}));
  BOOST_CHECK_EXCEPTION(scaled_dot_product_attention(q, q, q, ints({5, 5})), Error,
                        message_has({"scaled_dot_product_attention", "bool", "int64"}));
  BOOST_CHECK_EXCEPTION(scaled_dot_product_attention(q, q, q, Tensor(), false, 1.5), Error,
                        message_has({"dropout", "1.5"}));
  BOOST_CHECK_EXCEPTION(scaled_dot_product_attention(q, randn({2, 5, 4}), q), Error,
                        message_has({"scaled_dot_product_attention", "feature dims differ"}));
  // a mask that broadcasts (one per batch row, or one for all) is accepted
  BOOST_CHECK_NO_THROW(scaled_dot_product_attention(q, q, q, bools({2, 1, 5})));
  BOOST_CHECK_NO_THROW(scaled_dot_product_attention(q, q, q, bools({5, 5})));
}

BOOST_AUTO_TEST_CASE(layers_fed_the_wrong_input) {
  Linear linear(4, 3);
  BOOST_CHECK_EXCEPTION(linear.forward(zeros({2, 5})), Error,
                        message_has({"Linear", "last dim 4", "[2,5]"}));
  Embedding embedding(10, 4);
  BOOST_CHECK_EXCEPTION(embedding.forward(tensor_i64({10})), Error,
                        message_has({"embedding: index 10", "size 10"}));
  BOOST_CHECK_EXCEPTION(embedding.forward(tensor({1.0})), Error,
                        message_has({"Embedding", "int64", "float32"}));
  LayerNorm norm(4);
  BOOST_CHECK_EXCEPTION(norm.forward(zeros({2, 5})), Error,
                        message_has({"layer_norm", "[4]", "[2,5]"}));
  BatchNorm2d batch_norm(1);
  BOOST_CHECK_EXCEPTION(batch_norm.forward(zeros({0, 1, 4, 4})), Error,
                        message_has({"BatchNorm2d", "more than one value per channel"}));
}

BOOST_AUTO_TEST_CASE(masked_attention_raises_no_false_alarm_under_anomaly_mode) {
  // Masks put -inf in the scores on purpose and a fully padded row gives zeros: no anomaly.
  MultiheadAttention mha(8, 2);
  mha.memory_efficient = false;  // the naive path, where the -inf scores are tensors
  Tensor x = randn({2, 5, 8});
  x.requires_grad_();
  Tensor pad = gt(tensor({0, 0, 0, 1, 1, 1, 1, 1, 1, 1}, {2, 5}), 0.5);  // row 2 all padding
  AnomalyMode anomaly;
  AttentionOutput out = mha.forward(x, x, x, pad, Tensor(), false, true, /*is_causal=*/true);
  BOOST_CHECK_NO_THROW(sum(out.output).backward());
  BOOST_CHECK(x.grad().defined());
}

BOOST_AUTO_TEST_CASE(every_nn_case_runs_clean_under_anomaly_mode) {
  OpRegistry registry;
  register_gradcheck_cases(registry);
  AnomalyMode anomaly;
  for (const GradcheckCase& c : registry.cases()) {
    try {
      sum(c.fn(OpRegistry::make_inputs(c))).backward();
    } catch (const Error& e) {
      BOOST_ERROR(c.op << ": " << e.what());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
