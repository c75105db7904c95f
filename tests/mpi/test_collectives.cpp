// broadcast, allgather and barrier across the ranks, their bad inputs (every rank sees the same
// error, so none is left waiting), and where the ranks run.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <string>

#include "tests/mpi/support.h"

namespace qkv::test {
namespace {

BOOST_AUTO_TEST_SUITE(collectives)

BOOST_AUTO_TEST_CASE(the_group_is_mpi_world) {
  on_every_rank([] {
    BOOST_TEST(world().name() == "mpi");
    BOOST_TEST(world().size() == launcher_world_size([](const char* v) { return std::getenv(v); }));
    // every rank has a different rank, 0..size-1
    Tensor ranks = world().allgather(tensor_i64({world().rank()}));
    for (int r = 0; r < world().size(); ++r) BOOST_TEST(ranks.to_vector<int64_t>()[r] == r);
  });
}

BOOST_AUTO_TEST_CASE(broadcast_gives_every_rank_the_roots_values) {
  on_every_rank([] {
    for (int root : {0, world().size() - 1}) {
      Tensor f = from_values(spread_values<float>(world().rank(), 77)).reshape({7, 11});
      world().broadcast(f, root);
      BOOST_TEST(bits_differ(f.to_vector<float>(), spread_values<float>(root, 77)) == 0,
                 "root " << root);
      Tensor i = tensor_i64({world().rank() * 10, -world().rank()});
      world().broadcast(i, root);
      BOOST_TEST(i.to_vector<int64_t>() == (std::vector<int64_t>{root * 10, -root}),
                 boost::test_tools::per_element());
    }
  });
}

BOOST_AUTO_TEST_CASE(allgather_stacks_the_ranks_tensors_in_rank_order) {
  on_every_rank([] {
    Tensor mine = from_values(spread_values<double>(world().rank(), 6)).reshape({2, 3});
    Tensor all = world().allgather(mine);
    BOOST_TEST(all.shape() == (Shape{world().size(), 2, 3}));
    std::vector<double> got = all.to_vector<double>();
    for (int r = 0; r < world().size(); ++r)
      BOOST_TEST(bits_differ(std::vector<double>(got.begin() + 6 * r, got.begin() + 6 * (r + 1)),
                             spread_values<double>(r, 6)) == 0,
                 "row " << r);
  });
}

BOOST_AUTO_TEST_CASE(shapes_that_differ_between_ranks_are_an_error_on_every_rank) {
  on_every_rank([] {
    Tensor mine = zeros({2, 3 + (world().rank() == 1 ? 1 : 0)});
    std::string message;
    try {
      world().allgather(mine);
    } catch (const Error& e) {
      message = e.what();
    }
    BOOST_TEST(message ==
               "allgather: rank 1 passed float32 [2,4], rank 0 passed float32 [2,3] (every rank "
               "must pass the same dtype and shape)");
    message.clear();
    try {
      world().broadcast(mine, 0);
    } catch (const Error& e) {
      message = e.what();
    }
    BOOST_TEST(message.find("broadcast: rank 1 passed float32 [2,4]") == 0, message);
    world().barrier();  // the group is still usable
  });
}

BOOST_AUTO_TEST_CASE(what_the_mpi_group_cannot_reduce) {
  on_every_rank([] {
    auto message_of = [](const Tensor& t) {
      try {
        world().allreduce_sum(t);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    BOOST_TEST(message_of(zeros({3}).to(DType::bf16)) ==
               "allreduce_sum: sums float32, float64 or int64 tensors, got bfloat16");
    BOOST_TEST(message_of(zeros({3, 2}).transpose(0, 1)) ==
               "allreduce_sum: needs a defined, contiguous tensor");
    BOOST_TEST(message_of(Tensor()) == "allreduce_sum: needs a defined, contiguous tensor");
    std::string root;
    try {
      world().broadcast(zeros({1}), world().size());
    } catch (const Error& e) {
      root = e.what();
    }
    BOOST_TEST(root == "broadcast: root " + std::to_string(world().size()) + " is not a rank of " +
                           std::to_string(world().size()));
  });
}

// Under tests/mpi/two_hosts.sh the ranks run in different network namespaces: each rank's
// /proc/self/ns/net differs, so their traffic went over the virtual link between them.
boost::test_tools::assertion_result launched_on_two_hosts(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result result(std::getenv("QKV_MPI_SEPARATE_NETNS") != nullptr);
  result.message() << "not started by tests/mpi/two_hosts.sh";
  return result;
}

BOOST_AUTO_TEST_CASE(each_rank_runs_in_its_own_network_namespace,
                     *boost::unit_test::precondition(launched_on_two_hosts)) {
  on_every_rank([] {
    char link[128] = {};
    QKV_CHECK(readlink("/proc/self/ns/net", link, sizeof link - 1) > 0, "test",
              "cannot read /proc/self/ns/net");
    // "net:[4026532177]": the namespace's inode number
    int64_t inode = std::strtoll(std::string(link).substr(5).c_str(), nullptr, 10);
    std::vector<int64_t> all = world().allgather(tensor_i64({inode})).to_vector<int64_t>();
    for (int r = 1; r < world().size(); ++r) BOOST_TEST(all[r] != all[0], "rank " << r);
  });
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace qkv::test
