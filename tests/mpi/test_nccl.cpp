// The NCCL process group on one GPU (one rank: NCCL will not put two ranks on one device). The
// ordered sum still goes through every step - the send/receive of chunks, the sum, the
// allgather - so a wrong offset or count shows as a changed value. Skipped without a GPU or
// without NCCL in the build, never passed.
#include <boost/test/unit_test.hpp>

#include "nn/data_parallel.h"
#include "tests/mpi/support.h"

#ifdef QKV_WITH_NCCL
#include "cuda/cuda_backend.h"
#include "cuda/nccl_process_group.h"
#endif

namespace qkv::test {
namespace {

boost::test_tools::assertion_result gpu_and_nccl(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result result(false);
#ifdef QKV_WITH_NCCL
  if (cuda::init()) return true;
  result.message() << "no GPU: " << cuda::status();
#else
  result.message() << "built without NCCL";
#endif
  return result;
}

#ifdef QKV_WITH_NCCL
ProcessGroup& nccl_group() {
  static std::shared_ptr<ProcessGroup> group =
      cuda::nccl_process_group(ProcessGroup::from_environment());
  return *group;
}
#endif

BOOST_AUTO_TEST_SUITE(nccl, *boost::unit_test::precondition(gpu_and_nccl))

#ifdef QKV_WITH_NCCL
BOOST_AUTO_TEST_CASE(collectives_on_cuda_tensors) {
  on_every_rank([] {
    BOOST_TEST(nccl_group().name() == "nccl");
    BOOST_TEST(nccl_group().size() == world().size());
    for (int64_t n : {int64_t(1), int64_t(1009)}) {
      std::vector<float> mine = spread_values<float>(world().rank(), n);
      Tensor data = from_values(mine).to(Device::cuda());
      nccl_group().allreduce_sum(data);
      std::vector<float> expected = spread_values<float>(0, n);
      for (int r = 1; r < world().size(); ++r) {
        std::vector<float> next = spread_values<float>(r, n);
        for (int64_t i = 0; i < n; ++i) expected[i] += next[i];
      }
      BOOST_TEST(bits_differ(data.cpu().to_vector<float>(), expected) == 0, n << " elements");
    }
    Tensor i = tensor_i64({5, -7}).to(Device::cuda());
    nccl_group().allreduce_sum(i);
    BOOST_TEST(i.cpu().to_vector<int64_t>() ==
                   (std::vector<int64_t>{5 * world().size(), -7 * world().size()}),
               boost::test_tools::per_element());
    Tensor b = from_values(spread_values<float>(world().rank(), 10)).to(Device::cuda());
    nccl_group().broadcast(b, 0);
    BOOST_TEST(bits_differ(b.cpu().to_vector<float>(), spread_values<float>(0, 10)) == 0);
    Tensor all = nccl_group().allgather(b);
    BOOST_TEST(all.shape() == (Shape{world().size(), 10}));
    std::vector<float> rows = all.cpu().to_vector<float>();
    for (int r = 0; r < world().size(); ++r)
      BOOST_TEST(bits_differ(std::vector<float>(rows.begin() + 10 * r, rows.begin() + 10 * (r + 1)),
                             spread_values<float>(0, 10)) == 0,
                 "row " << r);
    std::string message;
    try {
      nccl_group().allreduce_sum(zeros({3}));
    } catch (const Error& e) {
      message = e.what();
    }
    BOOST_TEST(message ==
               "allreduce_sum: the NCCL group reduces tensors on cuda:0, got one on cpu");
  });
}

BOOST_AUTO_TEST_CASE(data_parallel_on_the_gpu_matches_plain_backward) {
  on_every_rank([] {
    QKV_CHECK(world().size() == 1, "test", "the NCCL suite runs as one rank (ctest's mpi_nccl)");
    Generator gen(5);
    std::vector<Tensor> params;
    for (Shape s : {Shape{6, 4}, Shape{6}, Shape{2, 6}})
      params.push_back(uniform(s, -1, 1, {}, &gen).to(Device::cuda()).requires_grad_());
    Tensor x = uniform({3, 4}, -1, 1, {}, &gen).to(Device::cuda());
    auto loss = [&] {
      return sum(square(linear(tanh(linear(x, params[0], params[1])), params[2])));
    };
    loss().backward();
    std::vector<std::vector<float>> plain;
    for (Tensor& p : params) {
      plain.push_back(p.grad().cpu().to_vector<float>());
      p.zero_grad();
    }
    nn::DataParallel dp(params, std::shared_ptr<ProcessGroup>(&nccl_group(), [](ProcessGroup*) {}),
                        {.bucket_bytes = 0});
    dp.backward(loss());
    for (size_t i = 0; i < params.size(); ++i)  // one rank: the sum is its own gradient
      BOOST_TEST(bits_differ(params[i].grad().cpu().to_vector<float>(), plain[i]) == 0,
                 "parameter " << i);
  });
}
#else
BOOST_AUTO_TEST_CASE(needs_nccl) {}
#endif

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace qkv::test
