#include <boost/test/unit_test.hpp>
#include <cmath>
#include <utility>

#include "engine/ops.h"
#include "engine/random.h"
#include "train/trainer/micro_batches.h"

using namespace qkv;
using namespace qkv::train;

BOOST_AUTO_TEST_SUITE(micro_batches)

BOOST_AUTO_TEST_CASE(split_is_contiguous_in_order_and_the_first_pieces_are_longer) {
  using Pieces = std::vector<std::vector<size_t>>;
  BOOST_TEST((split_micro_batches({0, 1, 2, 3, 4, 5, 6}, 3) == Pieces{{0, 1, 2}, {3, 4}, {5, 6}}));
  BOOST_TEST((split_micro_batches({9, 8, 7, 6}, 2) == Pieces{{9, 8}, {7, 6}}));
  BOOST_TEST((split_micro_batches({4, 2}, 3) == Pieces{{4}, {2}, {}}));
  BOOST_TEST((split_micro_batches({5}, 1) == Pieces{{5}}));
}

namespace {

// A least-squares model w [3] on rows of x [8, 3] with targets y [8], and the micro-batch hooks on
// it that records where each micro-batch's generator counters start.
struct Regression {
  Tensor w = randn({3}).requires_grad_();
  Tensor x = randn({8, 3}), y = randn({8});
  Tensor rows;
  std::vector<uint64_t> starts;

  Tensor squared_errors(const Tensor& index) const {
    Tensor r = sub(matmul(index_select(x, 0, index), w), index_select(y, 0, index));
    return sum(mul(r, r));
  }
  MicroBatchHooks hooks() {
    return {[this](const std::vector<size_t>& indices) {
              std::vector<double> v(indices.begin(), indices.end());
              rows = tensor(v, {int64_t(v.size())}, TensorOptions{}.with(DType::i64));
            },
            [this] { return rows.size(0); },
            [this](double global_terms) {
              starts.push_back(default_generator().offset());
              default_generator().take(5);  // a micro-batch's dropout draws
              return div(squared_errors(rows), full({}, global_terms));
            }};
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(accumulated_gradient_is_the_in_order_sum_and_the_batch_mean_gradient) {
  manual_seed(3);
  Regression m;
  MicroBatchSteps steps({m.w}, single_process_group(), 3, true);
  BOOST_TEST(steps.active());
  const std::vector<size_t> batch = {7, 1, 4, 0, 2, 6, 5};  // pieces {7,1,4}, {0,2}, {6,5}
  default_generator().set_offset(1000);
  const MicroBatchSteps::Result r = steps.step(1, batch, m.hooks());
  const std::vector<float> accumulated = m.w.grad().to_vector<float>();
  BOOST_TEST(r.terms == 7);

  // the same sums by hand: each piece's gradient from zero, added in order
  std::vector<Tensor> pieces_grad;
  double loss_by_hand = 0;
  for (const auto& piece : split_micro_batches(batch, 3)) {
    m.w.zero_grad();
    std::vector<double> v(piece.begin(), piece.end());
    Tensor loss =
        div(m.squared_errors(tensor(v, {int64_t(v.size())}, TensorOptions{}.with(DType::i64))),
            full({}, 7.0));
    loss.backward();
    loss_by_hand += loss.item();
    pieces_grad.push_back(m.w.grad());
  }
  const std::vector<float> in_order =
      add(add(pieces_grad[0], pieces_grad[1]), pieces_grad[2]).to_vector<float>();
  BOOST_TEST(accumulated == in_order);  // bit for bit
  BOOST_TEST(r.loss == loss_by_hand);

  // and, to rounding, the gradient of the whole batch's mean
  m.w.zero_grad();
  std::vector<double> all(batch.begin(), batch.end());
  Tensor mean =
      div(m.squared_errors(tensor(all, {7}, TensorOptions{}.with(DType::i64))), full({}, 7.0));
  mean.backward();
  const std::vector<float> whole = m.w.grad().to_vector<float>();
  for (size_t i = 0; i < whole.size(); ++i)
    BOOST_TEST(accumulated[i] == whole[i], boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(r.loss == mean.item(), boost::test_tools::tolerance(1e-6));

  // every micro-batch starts at the step's counter (its examples' draws); the step ends
  // kStepCounters past it
  BOOST_TEST((m.starts == std::vector<uint64_t>{1000, 1000, 1000}));
  BOOST_TEST(default_generator().offset() == 1000 + kStepCounters);
}

namespace {

// The regression with dropout on the rows of x: the loss an example contributes depends on the
// mask it gets.
struct DroppedRegression : Regression {
  Tensor squared_errors(const Tensor& index) const {
    Tensor r = sub(matmul(dropout(index_select(x, 0, index), 0.5), w), index_select(y, 0, index));
    return sum(mul(r, r));
  }
  MicroBatchHooks hooks() {
    MicroBatchHooks t = Regression::hooks();
    t.summed_loss = [this](double global_terms) {
      return div(squared_errors(rows), full({}, global_terms));
    };
    return t;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(dropout_masks_follow_the_examples_so_micro_batches_match_the_whole_batch) {
  manual_seed(4);
  DroppedRegression m;
  const std::vector<size_t> batch = {7, 1, 4, 0, 2, 6, 5};
  const MicroBatchHooks hooks = m.hooks();
  auto gradient = [&](int64_t accumulate) {
    MicroBatchSteps steps({m.w}, single_process_group(), accumulate, true);
    default_generator().set_offset(500);
    m.w.zero_grad();
    double loss = 0;
    if (steps.active()) {
      loss = steps.step(1, batch, hooks).loss;
    } else {
      loss = steps.whole_batch(1, batch, [&] {
        hooks.load_batch(batch);
        Tensor l = hooks.summed_loss(7.0);
        l.backward();
        return l.item();
      });
    }
    BOOST_TEST(default_generator().offset() == 500 + kStepCounters);  // however it was cut
    return std::make_pair(loss, m.w.grad().to_vector<float>());
  };
  const auto whole = gradient(1), three = gradient(3), seven = gradient(7);
  BOOST_TEST(three.first == whole.first, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(seven.first == whole.first, boost::test_tools::tolerance(1e-6));
  for (size_t i = 0; i < whole.second.size(); ++i) {
    BOOST_TEST(three.second[i] == whole.second[i], boost::test_tools::tolerance(1e-5f));
    BOOST_TEST(seven.second[i] == whole.second[i], boost::test_tools::tolerance(1e-5f));
  }
  // the masks do matter: another step's draws (another offset) give another loss
  MicroBatchSteps steps({m.w}, single_process_group(), 3, true);
  default_generator().set_offset(501);
  BOOST_TEST(std::abs(steps.step(1, batch, hooks).loss - whole.first) > 1e-3);
}

BOOST_AUTO_TEST_CASE(one_process_without_accumulation_is_not_cut) {
  MicroBatchSteps steps({}, single_process_group(), 1, true);
  BOOST_TEST(!steps.active());
}

BOOST_AUTO_TEST_SUITE_END()
