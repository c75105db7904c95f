#include <boost/test/unit_test.hpp>
#include <set>

#include "train/batching.h"

using namespace qkv::train;

BOOST_AUTO_TEST_SUITE(batching)

BOOST_AUTO_TEST_CASE(shapes_padding_masks_and_teacher_forcing) {
  std::vector<Example> ex = {{{5, 6, 7}, {8}}, {{9}, {10, 11, 12, 13}}};
  Batch b = make_batch(ex, {0, 1});
  BOOST_TEST((b.src.shape() == qkv::Shape{2, 3}));
  BOOST_TEST((b.src.to_vector<int64_t>() == std::vector<int64_t>{5, 6, 7, 9, 0, 0}));
  BOOST_TEST((b.src_pad_mask.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 0, 1, 1}));
  BOOST_TEST((b.src_pad_mask.dtype() == qkv::DType::b8));
  // tgt_in = BOS + tgt, tgt_out = tgt + EOS, both [2, 5].
  BOOST_TEST((b.tgt_in.shape() == qkv::Shape{2, 5}));
  BOOST_TEST(
      (b.tgt_in.to_vector<int64_t>() == std::vector<int64_t>{1, 8, 0, 0, 0, 1, 10, 11, 12, 13}));
  BOOST_TEST(
      (b.tgt_out.to_vector<int64_t>() == std::vector<int64_t>{8, 2, 0, 0, 0, 10, 11, 12, 13, 2}));
  BOOST_TEST(
      (b.tgt_pad_mask.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 1, 0, 0, 0, 0, 0}));
  BOOST_TEST(b.target_tokens == 7);
  BOOST_TEST(b.source_tokens == 4);
}

BOOST_AUTO_TEST_CASE(truncation_keeps_room_for_eos) {
  std::vector<Example> ex = {{{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}}};
  Batch b = make_batch(ex, {0}, 4);
  BOOST_TEST((b.src.shape() == qkv::Shape{1, 4}));
  BOOST_TEST((b.tgt_out.to_vector<int64_t>() == std::vector<int64_t>{7, 8, 9, 2}));
  BOOST_TEST((b.tgt_in.to_vector<int64_t>() == std::vector<int64_t>{1, 7, 8, 9}));
}

BOOST_AUTO_TEST_CASE(classification_batches_carry_labels) {
  std::vector<Example> ex = {{{4, 5}, {}, 1}, {{6}, {}, 0}};
  Batch b = make_batch(ex, {1, 0});
  BOOST_TEST((b.labels.to_vector<int64_t>() == std::vector<int64_t>{0, 1}));
  BOOST_TEST(!b.tgt_in.defined());
}

std::vector<Example> examples_of_lengths(size_t n) {
  std::vector<Example> ex;
  for (size_t i = 0; i < n; ++i) ex.push_back({std::vector<int64_t>(1 + (i * 7) % 23, 4), {5}});
  return ex;
}

BOOST_AUTO_TEST_CASE(an_epoch_covers_every_example_once_in_a_seeded_order) {
  auto ex = examples_of_lengths(103);
  BatchingOptions o{.batch_size = 10};
  auto plan = plan_batches(ex, o, 42, 0);
  BOOST_TEST(plan.size() == 11u);
  BOOST_TEST(plan.back().size() == 3u);
  std::multiset<size_t> seen;
  for (const auto& batch : plan) seen.insert(batch.begin(), batch.end());
  BOOST_TEST(seen.size() == 103u);
  BOOST_TEST(std::set<size_t>(seen.begin(), seen.end()).size() == 103u);
  BOOST_TEST((plan_batches(ex, o, 42, 0) == plan));
  BOOST_TEST((plan_batches(ex, o, 42, 1) != plan));
  o.drop_last = true;
  BOOST_TEST(plan_batches(ex, o, 42, 0).size() == 10u);
}

BOOST_AUTO_TEST_CASE(bucketing_reduces_padding) {
  auto ex = examples_of_lengths(1000);
  auto padded_positions = [&](const std::vector<std::vector<size_t>>& plan) {
    int64_t total = 0;
    for (const auto& batch : plan) {
      Batch b = make_batch(ex, batch);
      total += b.src.numel() - b.source_tokens;
    }
    return total;
  };
  BatchingOptions plain{.batch_size = 16};
  BatchingOptions bucketed{.batch_size = 16, .bucket_by_length = true, .bucket_window = 20};
  int64_t waste_plain = padded_positions(plan_batches(ex, plain, 1));
  int64_t waste_bucketed = padded_positions(plan_batches(ex, bucketed, 1));
  BOOST_TEST(waste_bucketed * 4 < waste_plain);
}

BOOST_AUTO_TEST_SUITE_END()
