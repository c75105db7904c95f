// plan_fused_masks: which bool masks and patterns reach a device's fused attention kernel as
// (key padding [B, S], causal), with the key padding checked value by value, and which are
// refused (the caller then composes attention from engine ops). Runs on the CPU: the planning is
// shape logic plus a few views, the same on every device.
#include <boost/test/unit_test.hpp>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/fused_attention_plan.h"
#include "nn/attention.h"
#include "nn/efficient_attention.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::bool_mask;
using qkv::testing::check_error;
using qkv::testing::check_values;

namespace {

// The plan's key padding as numbers, after checking its form: contiguous bool [batch, S].
void check_padding(const FusedMaskPlan& plan, int64_t S, const std::vector<double>& expected) {
  BOOST_REQUIRE(plan.key_padding.defined());
  BOOST_TEST((plan.key_padding.dtype() == DType::b8));
  BOOST_TEST(plan.key_padding.is_contiguous());
  BOOST_TEST((plan.key_padding.shape() == Shape({plan.batch, S})));
  check_values(plan.key_padding.to(DType::f64), expected);
}

AttentionPattern causal_pattern() {
  AttentionPattern p;
  p.causal = true;
  return p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fused_attention_plan)

BOOST_AUTO_TEST_CASE(no_mask_is_plain_attention_over_all_leading_dims) {
  auto plan = plan_fused_masks({}, {}, {2, 3}, 5, 7);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 1);
  BOOST_TEST(plan->heads == 6);
  BOOST_TEST(!plan->key_padding.defined());
  BOOST_TEST(!plan->causal);
  // undefined entries are skipped, as efficient_attention skips them
  plan = plan_fused_masks({Tensor()}, causal_pattern(), {4}, 3, 3);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 1);
  BOOST_TEST(plan->heads == 4);
  BOOST_TEST(plan->causal);
  BOOST_TEST(!plan->key_padding.defined());
}

// MultiheadAttention's key_padding_mask [B, S] arrives as [B, 1, 1, S]: the kernel's batch is B,
// its heads H, and the mask is the original rows.
BOOST_AUTO_TEST_CASE(multihead_key_padding_keeps_batch_and_heads) {
  const std::vector<double> pad = {0, 0, 1, 1,  //
                                   0, 1, 0, 0};
  const Tensor m = bool_mask(pad, {2, 4}).reshape({2, 1, 1, 4});
  for (const AttentionPattern& pattern : {AttentionPattern{}, causal_pattern()}) {
    auto plan = plan_fused_masks({m}, pattern, {2, 3}, 5, 4);
    BOOST_REQUIRE(plan.has_value());
    BOOST_TEST(plan->batch == 2);
    BOOST_TEST(plan->heads == 3);
    BOOST_TEST(plan->causal == pattern.causal);
    check_padding(*plan, 4, pad);
  }
}

// Cross-attention: T and S differ; the mask is over the S keys of memory.
BOOST_AUTO_TEST_CASE(cross_attention_key_padding_with_other_key_length) {
  const std::vector<double> pad = {0, 0, 0, 0, 0, 1,   //
                                   1, 1, 1, 1, 1, 1};  // batch 1 sees no key at all
  auto plan = plan_fused_masks({bool_mask(pad, {2, 1, 1, 6})}, {}, {2, 4}, 3, 6);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 2);
  BOOST_TEST(plan->heads == 4);
  check_padding(*plan, 6, pad);
}

// Several key-padding masks are or-ed: one per batch, one shared by all ([S] broadcast).
BOOST_AUTO_TEST_CASE(several_key_padding_masks_are_or_ed) {
  const Tensor per_batch = bool_mask({1, 0, 0,  //
                                      0, 0, 0},
                                     {2, 1, 1, 3});
  const Tensor shared = bool_mask({0, 0, 1}, {3});
  auto plan = plan_fused_masks({per_batch, shared}, {}, {2, 2}, 4, 3);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 2);
  BOOST_TEST(plan->heads == 2);
  check_padding(*plan, 3,
                {1, 0, 1,  //
                 0, 0, 1});
  // the shared one alone: nothing varies over the leading dims, so one row serves all of them
  plan = plan_fused_masks({shared}, {}, {2, 2}, 4, 3);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 1);
  BOOST_TEST(plan->heads == 4);
  check_padding(*plan, 3, {0, 0, 1});
}

// A mask that differs between heads is still the same keys for every query: the kernel's batch
// becomes batch x heads, with one row per (b, h).
BOOST_AUTO_TEST_CASE(masks_varying_over_heads_fold_heads_into_the_batch) {
  const Tensor per_head = bool_mask({1, 0, 0,  //
                                     0, 1, 0},
                                    {1, 2, 1, 3});  // [1, H, 1, S]: the same for both batches
  auto plan = plan_fused_masks({per_head}, {}, {3, 2}, 4, 3);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 6);
  BOOST_TEST(plan->heads == 1);
  check_padding(*plan, 3,
                {1, 0, 0, 0, 1, 0,  //
                 1, 0, 0, 0, 1, 0,  //
                 1, 0, 0, 0, 1, 0});
  // with a per-batch mask as well: row (b, h) = per_batch[b] | per_head[h]
  const Tensor per_batch = bool_mask({0, 0, 1, 0, 0, 0, 0, 0, 0}, {3, 1, 1, 3});
  plan = plan_fused_masks({per_batch, per_head}, causal_pattern(), {3, 2}, 4, 3);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 6);
  BOOST_TEST(plan->heads == 1);
  BOOST_TEST(plan->causal);
  check_padding(*plan, 3,
                {1, 0, 1, 0, 1, 1,  //
                 1, 0, 0, 0, 1, 0,  //
                 1, 0, 0, 0, 1, 0});
}

// A mask of size 1 along the keys hides all or none of them: expanded to S columns.
BOOST_AUTO_TEST_CASE(mask_broadcast_over_keys_is_expanded) {
  auto plan = plan_fused_masks({bool_mask({0, 1}, {2, 1, 1, 1})}, {}, {2, 2}, 3, 4);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 2);
  check_padding(*plan, 4, {0, 0, 0, 0, 1, 1, 1, 1});
}

// scaled_dot_product_attention on [N, T, d] (3-D) and on [T, d] (2-D); a [T, S] mask with T = 1
// (one query, as in a decoding step) is key padding.
BOOST_AUTO_TEST_CASE(other_ranks_and_a_single_query) {
  auto plan = plan_fused_masks({bool_mask({0, 1, 1, 0}, {2, 1, 2})}, {}, {2}, 5, 2);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 2);
  BOOST_TEST(plan->heads == 1);
  check_padding(*plan, 2, {0, 1, 1, 0});

  plan = plan_fused_masks({bool_mask({0, 1, 0}, {1, 3})}, causal_pattern(), {}, 1, 3);
  BOOST_REQUIRE(plan.has_value());
  BOOST_TEST(plan->batch == 1);
  BOOST_TEST(plan->heads == 1);
  BOOST_TEST(plan->causal);
  check_padding(*plan, 3, {0, 1, 0});
}

// What the kernel cannot say: masks that differ between queries (including a causal mask given
// as a tensor - recognizing it would mean reading it back from the device), sparse patterns,
// float masks, and masks that do not broadcast to the scores.
BOOST_AUTO_TEST_CASE(refused_masks_and_patterns) {
  const Shape lead = {2, 2};
  const int64_t T = 3, S = 3;
  const Tensor arbitrary = bool_mask({0, 1, 0, 1, 0, 0, 0, 0, 1}, {T, S});
  BOOST_TEST(!plan_fused_masks({arbitrary}, {}, lead, T, S).has_value());
  BOOST_TEST(!plan_fused_masks({causal_mask(T, S)}, {}, lead, T, S).has_value());
  // per-query rows, even alongside an acceptable key-padding mask
  const Tensor pad = bool_mask({0, 0, 1, 0, 0, 0}, {2, 1, 1, 3});
  BOOST_TEST(!plan_fused_masks({pad, arbitrary.reshape({1, 1, T, S})}, {}, lead, T, S));
  BOOST_TEST(!plan_fused_masks({zeros({2, 2, T, S}, {DType::b8})}, {}, lead, T, S));
  // sparse patterns
  AttentionPattern window;
  window.window = 1;
  BOOST_TEST(!plan_fused_masks({}, window, lead, T, S).has_value());
  AttentionPattern sparse;
  sparse.block_size = 2;
  sparse.block_layout = band_block_layout(T, S, 2, 0, 1);
  BOOST_TEST(!plan_fused_masks({pad}, sparse, lead, T, S).has_value());
  // float (additive) masks, and shapes that do not broadcast
  BOOST_TEST(!plan_fused_masks({zeros({2, 1, 1, S})}, {}, lead, T, S).has_value());
  BOOST_TEST(!plan_fused_masks({zeros({2, 1, 1, S + 1}, {DType::b8})}, {}, lead, T, S));
  BOOST_TEST(!plan_fused_masks({zeros({3, 1, 1, S}, {DType::b8})}, {}, lead, T, S));
  BOOST_TEST(!plan_fused_masks({zeros({1, 2, 1, 1, S}, {DType::b8})}, {}, lead, T, S));
}

// The CPU has no contiguous device kernel, so the plan's route never fits it; its own kernel
// (Backend::supports_attention) still takes every pattern, and the device kernel says so and
// refuses to be called anyway.
BOOST_AUTO_TEST_CASE(cpu_keeps_its_own_kernel) {
  const Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 4});
  AttentionProblem problem;
  problem.q = q, problem.k = k, problem.v = v;
  BOOST_TEST(!fits_fused_kernel(cpu::cpu_backend(), problem));
  AttentionPattern window;
  window.window = 1;
  BOOST_TEST(efficient_attention_supported(q, k, v, {causal_mask(3, 5)}, window));
  Backend& cpu_backend = cpu::cpu_backend();
  BOOST_TEST(!cpu_backend.supports_fused_attention(DType::f32, 4, 2));
  check_error(
      [&] {
        cpu_backend.fused_attention_forward(q, k, v, Tensor(), false, 0.5, zeros({2, 3, 4}),
                                            zeros({2, 3}));
      },
      {"fused_attention_forward", "cpu backend has no fused attention"});
}

BOOST_AUTO_TEST_SUITE_END()
