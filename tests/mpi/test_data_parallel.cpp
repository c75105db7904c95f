// nn::DataParallel across ranks: after dp.backward(loss) every parameter's .grad equals, bit for
// bit, the average of the ranks' own gradients computed by hand (each rank's plain backward,
// allgathered, added in rank order, divided by the number of ranks) - with overlap on and off,
// and with one bucket per parameter, a few buckets, or one bucket for all.
#include <boost/test/unit_test.hpp>

#include "nn/data_parallel.h"
#include "tests/mpi/support.h"

namespace qkv::test {
namespace {

// A small network with the cases that matter to bucketing: a weight used twice in one graph
// (its gradient is complete only after both uses), a parameter no rank uses, and one that only
// rank 0 uses, at the very start of its forward pass: rank 0 finishes its gradient last, the
// other ranks know from the start that they have none, and yet all must start its bucket in the
// same order among the others.
struct Net {
  std::vector<Tensor> params;
  explicit Net(uint64_t seed) {
    Generator gen(seed);
    for (Shape shape : {Shape{8, 4},  // 0: w1
                        Shape{8},     // 1: b1
                        Shape{8, 8},  // 2: w2, applied twice
                        Shape{4},     // 3: rank 0 only
                        Shape{3, 8},  // 4: w3
                        Shape{3},     // 5: b3
                        Shape{5}})    // 6: never used
      params.push_back(uniform(shape, -1, 1, {}, &gen).requires_grad_());
  }
  Tensor loss(int rank) const {
    Generator gen(1000 + uint64_t(rank));
    Tensor x = uniform({6, 4}, -2, 2, {}, &gen);
    if (rank == 0) x = mul(x, params[3]);
    Tensor h = tanh(linear(x, params[0], params[1]));
    h = tanh(linear(tanh(linear(h, params[2])), params[2]));
    return sum(square(linear(h, params[4], params[5])));
  }
};

// The ranks' plain gradients, added in rank order and divided by the number of ranks, by hand.
std::vector<std::vector<float>> expected_gradients(const Net& net, bool average) {
  for (Tensor p : net.params) p.zero_grad();
  net.loss(world().rank()).backward();
  std::vector<std::vector<float>> expected;
  for (const Tensor& p : net.params) {
    Tensor g = p.grad().defined() ? p.grad() : zeros(p.shape());
    std::vector<float> all = world().allgather(g.contiguous()).to_vector<float>();
    size_t n = size_t(p.numel());
    std::vector<float> sum(all.begin(), all.begin() + n);
    for (int r = 1; r < world().size(); ++r)
      for (size_t i = 0; i < n; ++i) sum[i] += all[r * n + i];
    if (average)
      for (float& v : sum) v /= float(world().size());
    expected.push_back(sum);
  }
  for (Tensor p : net.params) p.zero_grad();
  return expected;
}

BOOST_AUTO_TEST_SUITE(data_parallel)

BOOST_AUTO_TEST_CASE(reduced_gradients_equal_the_hand_average_bit_for_bit) {
  on_every_rank([] {
    Net net(7);
    auto expected = expected_gradients(net, true);
    for (bool overlap : {true, false})
      for (size_t bucket_bytes : {size_t(0), size_t(300), size_t(4) << 20}) {
        nn::DataParallel dp(net.params, ProcessGroup::from_environment(),
                            {.bucket_bytes = bucket_bytes, .overlap = overlap});
        for (Tensor p : net.params) p.zero_grad();
        dp.backward(net.loss(world().rank()));
        for (size_t i = 0; i < net.params.size(); ++i)
          BOOST_TEST(bits_differ(net.params[i].grad().to_vector<float>(), expected[i]) == 0,
                     "parameter " << i << ", overlap " << overlap << ", " << bucket_bytes
                                  << "-byte buckets, " << dp.buckets().size() << " buckets");
        // with overlap, the buckets of the later layers started before backward had returned
        if (overlap && dp.buckets().size() > 1)
          BOOST_TEST(dp.buckets_started_during_backward() > 0);
        if (!overlap) BOOST_TEST(dp.buckets_started_during_backward() == 0);
        // the timings: the calls made during backward are a part of all of them, the rest of
        // them lies after backward; without overlap none ran during backward, and the last
        // reduction ended after it
        const nn::DataParallel::Timings& t = dp.last_timings();
        BOOST_TEST(t.backward > 0);
        BOOST_TEST(t.in_collectives_during_backward >= 0);
        BOOST_TEST(t.in_collectives >= t.in_collectives_during_backward);
        BOOST_TEST(t.in_collectives - t.in_collectives_during_backward <= t.after_backward);
        if (overlap && dp.buckets().size() > 1) BOOST_TEST(t.in_collectives_during_backward > 0);
        if (!overlap) {
          BOOST_TEST(t.in_collectives_during_backward == 0);
          BOOST_TEST(t.last_reduction_before_backward_end < 0);
          BOOST_TEST(-t.last_reduction_before_backward_end <= t.after_backward);
        }
      }
  });
}

BOOST_AUTO_TEST_CASE(summing_instead_of_averaging) {
  on_every_rank([] {
    Net net(8);
    auto expected = expected_gradients(net, false);
    nn::DataParallel dp(net.params, ProcessGroup::from_environment(),
                        {.bucket_bytes = 100, .average = false});
    dp.backward(net.loss(world().rank()));
    for (size_t i = 0; i < net.params.size(); ++i)
      BOOST_TEST(bits_differ(net.params[i].grad().to_vector<float>(), expected[i]) == 0,
                 "parameter " << i);
  });
}

BOOST_AUTO_TEST_CASE(accumulated_micro_batches_are_reduced_once) {
  // loss.backward() for the first micro-batch, dp.backward for the last: the reduced gradient is
  // the average of the ranks' accumulated totals
  on_every_rank([] {
    Net net(9);
    for (Tensor p : net.params) p.zero_grad();
    net.loss(world().rank() + 10).backward();
    net.loss(world().rank()).backward();
    std::vector<std::vector<float>> expected;
    for (const Tensor& p : net.params) {
      Tensor g = p.grad().defined() ? p.grad() : zeros(p.shape());
      Tensor all = world().allgather(g.contiguous());
      Tensor sum = select(all, 0, 0);
      for (int r = 1; r < world().size(); ++r) sum = add(sum, select(all, 0, r));
      expected.push_back(div(sum, scalar_tensor(world().size())).to_vector<float>());
    }
    nn::DataParallel dp(net.params, ProcessGroup::from_environment(), {.bucket_bytes = 200});
    for (Tensor p : net.params) p.zero_grad();
    net.loss(world().rank() + 10).backward();
    dp.backward(net.loss(world().rank()));
    for (size_t i = 0; i < net.params.size(); ++i)
      BOOST_TEST(bits_differ(net.params[i].grad().to_vector<float>(), expected[i]) == 0,
                 "parameter " << i);
  });
}

BOOST_AUTO_TEST_CASE(broadcast_parameters_starts_every_rank_from_rank_0) {
  on_every_rank([] {
    Net net(100 + uint64_t(world().rank()));  // different weights on each rank
    nn::DataParallel dp(net.params, ProcessGroup::from_environment());
    dp.broadcast_parameters();
    Net rank0(100);
    for (size_t i = 0; i < net.params.size(); ++i)
      BOOST_TEST(
          bits_differ(net.params[i].to_vector<float>(), rank0.params[i].to_vector<float>()) == 0);
  });
}

BOOST_AUTO_TEST_CASE(ranks_with_different_models_are_told_so) {
  on_every_rank([] {
    Net net(1);
    std::vector<Tensor> params = net.params;
    if (world().rank() == 1) params.pop_back();
    std::string message;
    try {
      nn::DataParallel dp(params, ProcessGroup::from_environment());
    } catch (const Error& e) {
      message = e.what();
    }
    std::string expected = world().rank() == 1
                               ? "DataParallel: rank 0 has 7 parameters, rank 1 has 6"
                               : "DataParallel: rank 1 has 6 parameters, rank " +
                                     std::to_string(world().rank()) + " has 7";
    BOOST_TEST(message == expected + " (every rank must build the same model)");

    params = net.params;
    if (world().rank() == 1) params[2] = zeros({8, 7}).requires_grad_();
    message.clear();
    try {
      nn::DataParallel dp(params, ProcessGroup::from_environment());
    } catch (const Error& e) {
      message = e.what();
    }
    BOOST_TEST(message.find("DataParallel: parameter 2 has ") == 0, message);
  });
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace qkv::test
