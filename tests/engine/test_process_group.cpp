// The single-process group every run without mpirun gets, and the pieces of the ordered
// allreduce that need no second process: how a tensor is cut into the ranks' chunks, how the
// launcher's process count is read. The collectives across processes are tested in tests/mpi.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <map>
#include <string>

#include "engine/ops.h"
#include "engine/process_group.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_error;
using qkv::testing::check_values;

BOOST_AUTO_TEST_SUITE(process_group)

boost::test_tools::assertion_result without_mpi(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result result(!built_with_mpi());
  result.message() << "built with MPI: tests/mpi runs under mpirun";
  return result;
}

BOOST_AUTO_TEST_CASE(mpirun_without_mpi_in_the_build_is_an_error,
                     *boost::unit_test::precondition(without_mpi)) {
  // as if started by `mpirun -np 2`; the first case of the file, before any other has created
  // (and cached) the group
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  check_error([] { ProcessGroup::from_environment(); },
              {"process group: started by mpirun as one of 2 processes, but this qkv was built "
               "without MPI: install libopenmpi-dev (make deps) and configure with -DWITH_MPI=ON"});
  unsetenv("OMPI_COMM_WORLD_SIZE");
}

BOOST_AUTO_TEST_CASE(a_run_without_mpirun_is_a_group_of_one) {
  auto group = ProcessGroup::from_environment();
  BOOST_TEST(group->name() == "single");
  BOOST_TEST(group->rank() == 0);
  BOOST_TEST(group->size() == 1);
  BOOST_TEST(group.get() == ProcessGroup::from_environment().get());  // created once
}

BOOST_AUTO_TEST_CASE(collectives_of_one_process_leave_tensors_as_they_are) {
  auto group = single_process_group();
  Tensor t = tensor({1.5, -2.0, 3.25}, {3});
  group->allreduce_sum(t);
  check_values(t, {1.5, -2.0, 3.25});
  BOOST_TEST(group->start_allreduce_sum(t)->test());
  group->broadcast(t, 0);
  check_values(t, {1.5, -2.0, 3.25});
  Tensor all = group->allgather(t);
  BOOST_TEST(all.shape() == (Shape{1, 3}));
  check_values(all, {1.5, -2.0, 3.25});
  check_error([&] { group->broadcast(t, 1); }, {"broadcast: root 1 is not a rank of a group of 1"});
  check_error([&] { group->allreduce_sum(t.to(DType::bf16)); },
              {"allreduce_sum: sums float32, float64 or int64 tensors, got bfloat16"});
}

BOOST_AUTO_TEST_CASE(rank_chunks_cover_the_tensor_in_rank_order) {
  for (int64_t n : {0, 1, 2, 7, 1009})
    for (int size : {1, 2, 3, 8}) {
      int64_t next = 0, shortest = n, longest = 0;
      for (int r = 0; r < size; ++r) {
        auto [begin, end] = rank_chunk(n, size, r);
        BOOST_TEST(begin == next, "n " << n << ", rank " << r << " of " << size);
        shortest = std::min(shortest, end - begin);
        longest = std::max(longest, end - begin);
        next = end;
      }
      BOOST_TEST(next == n);
      BOOST_TEST(longest - shortest <= 1);
    }
  BOOST_TEST((rank_chunk(7, 3, 0) == std::pair<int64_t, int64_t>{0, 3}));
  BOOST_TEST((rank_chunk(7, 3, 2) == std::pair<int64_t, int64_t>{5, 7}));
}

BOOST_AUTO_TEST_CASE(the_launchers_process_count) {
  std::map<std::string, std::string> env;
  auto lookup = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  BOOST_TEST(launcher_world_size(lookup) == 1);
  env["PMI_SIZE"] = "4";  // MPICH's Hydra
  BOOST_TEST(launcher_world_size(lookup) == 4);
  env["OMPI_COMM_WORLD_SIZE"] = "3";  // OpenMPI
  BOOST_TEST(launcher_world_size(lookup) == 3);
  env["OMPI_COMM_WORLD_SIZE"] = "three";
  check_error([&] { launcher_world_size(lookup); },
              {"process group: the launcher's variable OMPI_COMM_WORLD_SIZE='three' is not a "
               "process count"});
}

BOOST_AUTO_TEST_SUITE_END()
