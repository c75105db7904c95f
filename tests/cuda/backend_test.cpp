// The backend object itself: probing without a GPU, registration, transfers, the caching
// allocator's counters, and errors that name the failing call.
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

BOOST_AUTO_TEST_SUITE(backend)

#ifdef QKV_WITH_CUDA
// Runs everywhere: on a machine without a GPU (or driver) init() must say so, not throw.
BOOST_AUTO_TEST_CASE(init_reports_availability_without_throwing) {
  bool ok = false;
  BOOST_REQUIRE_NO_THROW(ok = cuda::init());
  BOOST_TEST(ok == cuda::available());
  BOOST_TEST(ok == has_backend(DeviceKind::cuda));
  const std::string status = cuda::status();
  BOOST_TEST_MESSAGE("cuda status: " << status);
  if (ok)
    BOOST_TEST(status.find("compute capability") != std::string::npos, status);
  else
    BOOST_TEST(status.rfind("unavailable: ", 0) == 0, status);
}
#endif

BOOST_AUTO_TEST_CASE(tensors_round_trip_through_the_device, *utf::precondition(gpu_present)) {
  BOOST_TEST((gpu().device() == Device::cuda()));
  for (DType t : {DType::f32, DType::f64, DType::i64, DType::b8, DType::bf16}) {
    Tensor x = random_tensor({3, 5, 7}, t, -9, 9, 141);
    Tensor g = on_gpu(x);
    BOOST_TEST(g.device().is_cuda());
    check_equal(on_cpu(g), x, std::string("round trip ") + dtype_name(t));
    check_equal(on_cpu(on_gpu(x.transpose(0, 2))), x.transpose(0, 2).contiguous(),
                std::string("round trip of a view ") + dtype_name(t));
  }
  BOOST_TEST(on_gpu(scalar_tensor(2.5)).item() == 2.5);
}

BOOST_AUTO_TEST_CASE(the_allocator_caches_and_counts, *utf::precondition(gpu_present)) {
  const MemoryStats before = gpu().memory_stats();
  {
    Tensor a = Tensor::empty({1 << 20}, DType::f32, Device::cuda());  // 4 MiB
    const MemoryStats during = gpu().memory_stats();
    BOOST_TEST(during.bytes_in_use >= before.bytes_in_use + (size_t(4) << 20));
    BOOST_TEST(during.peak_bytes >= during.bytes_in_use);
  }
  const MemoryStats after = gpu().memory_stats();
  BOOST_TEST(after.bytes_in_use == before.bytes_in_use);
  BOOST_TEST(after.bytes_cached >= size_t(4) << 20);
  Tensor again = Tensor::empty({1 << 20}, DType::f32, Device::cuda());
  BOOST_TEST(gpu().memory_stats().cache_hits == after.cache_hits + 1);
  gpu().reset_peak_memory();
  BOOST_TEST(gpu().memory_stats().peak_bytes == gpu().memory_stats().bytes_in_use);
}

BOOST_AUTO_TEST_CASE(errors_name_the_failing_call, *utf::precondition(gpu_present)) {
  // far more than any GPU has: the allocator reports it instead of returning garbage
  try {
    Tensor huge = Tensor::empty({int64_t(1) << 48}, DType::f32, Device::cuda());
    BOOST_FAIL("a 1 PiB allocation succeeded");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("out of cuda memory") != std::string::npos, e.what());
  }
  Tensor a = Tensor::empty({1, 2, 2}, DType::i64, Device::cuda());
  BOOST_CHECK_THROW(gpu().matmul(a, a, a), Error);
}

BOOST_AUTO_TEST_SUITE_END()
