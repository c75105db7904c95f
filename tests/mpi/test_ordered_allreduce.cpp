// allreduce_sum adds the ranks' values in rank order, ((x0 + x1) + x2) + ..., and every rank gets
// the same bits: checked against the sum computed here, on each rank, from every rank's values
// (spread_value makes any rank's data known to all).
#include <boost/test/unit_test.hpp>

#include "tests/mpi/support.h"

namespace qkv::test {
namespace {

template <typename T>
std::vector<T> sum_in_order(int64_t n, const std::vector<int>& order) {
  std::vector<T> sum = spread_values<T>(order[0], n);
  for (size_t k = 1; k < order.size(); ++k) {
    std::vector<T> next = spread_values<T>(order[k], n);
    for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += next[size_t(i)];
  }
  return sum;
}

std::vector<int> ranks_ascending() {
  std::vector<int> order;
  for (int r = 0; r < world().size(); ++r) order.push_back(r);
  return order;
}

template <typename T>
void check_ordered_sum(int64_t n) {
  Tensor data = from_values(spread_values<T>(world().rank(), n));
  world().allreduce_sum(data);
  std::vector<T> got = data.to_vector<T>();
  BOOST_TEST(bits_differ(got, sum_in_order<T>(n, ranks_ascending())) == 0,
             "rank " << world().rank() << ", " << n << " elements of " << dtype_name(data.dtype()));
  // ... and the same bits on every other rank
  std::vector<T> everyone = world().allgather(data).template to_vector<T>();
  for (int r = 0; r < world().size(); ++r)
    BOOST_TEST(bits_differ(std::vector<T>(everyone.begin() + r * n, everyone.begin() + (r + 1) * n),
                           got) == 0,
               "rank " << r << "'s result differs from rank " << world().rank() << "'s");
}

BOOST_AUTO_TEST_SUITE(ordered_allreduce)

BOOST_AUTO_TEST_CASE(float32_sum_is_the_rank_order_sum_bit_for_bit) {
  on_every_rank([] {
    // 1009 elements: chunks of unequal length for 2 and 3 ranks
    check_ordered_sum<float>(1009);
  });
}

BOOST_AUTO_TEST_CASE(the_data_tells_summation_orders_apart) {
  // Addition is commutative, so with 2 ranks every order gives the same bits; from 3 ranks on,
  // adding in reverse order must change some elements, or the test above could not catch a
  // reduction that ignores the order.
  on_every_rank([] {
    if (world().size() < 3) return;
    std::vector<int> reverse = ranks_ascending();
    std::reverse(reverse.begin(), reverse.end());
    int64_t differ = bits_differ(sum_in_order<float>(1009, ranks_ascending()),
                                 sum_in_order<float>(1009, reverse));
    BOOST_TEST(differ > 100, differ << " of 1009 elements differ between the two orders");
  });
}

BOOST_AUTO_TEST_CASE(float64_and_int64) {
  on_every_rank([] {
    check_ordered_sum<double>(1009);
    check_ordered_sum<int64_t>(517);
  });
}

BOOST_AUTO_TEST_CASE(fewer_elements_than_ranks) {
  // ranks whose chunk is empty still take part
  on_every_rank([] {
    for (int64_t n : {0, 1, 2}) check_ordered_sum<float>(n);
  });
}

BOOST_AUTO_TEST_CASE(non_blocking_reductions_in_flight_together) {
  on_every_rank([] {
    Tensor a = from_values(spread_values<float>(world().rank(), 300000));
    Tensor b = from_values(spread_values<double>(world().rank(), 5));
    auto work_a = world().start_allreduce_sum(a);
    auto work_b = world().start_allreduce_sum(b);
    while (!work_b->test()) {
    }
    work_a->wait();
    BOOST_TEST(bits_differ(a.to_vector<float>(), sum_in_order<float>(300000, ranks_ascending())) ==
               0);
    BOOST_TEST(bits_differ(b.to_vector<double>(), sum_in_order<double>(5, ranks_ascending())) == 0);
  });
}

BOOST_AUTO_TEST_CASE(a_multidimensional_tensor_is_summed_elementwise) {
  on_every_rank([] {
    Tensor data = from_values(spread_values<float>(world().rank(), 24)).reshape({2, 3, 4});
    world().allreduce_sum(data);
    BOOST_TEST(bits_differ(data.to_vector<float>(), sum_in_order<float>(24, ranks_ascending())) ==
               0);
  });
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace qkv::test
