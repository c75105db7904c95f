// Tensor basics: factories, views sharing storage, contiguity, dtype conversion, printing.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "engine/backend.h"
#include "engine/cpu/bernoulli_range.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "engine/random.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_error;
using qkv::testing::check_values;

BOOST_AUTO_TEST_SUITE(tensor_basics)

BOOST_AUTO_TEST_CASE(factories) {
  check_values(zeros({2, 2}), {0, 0, 0, 0});
  check_values(ones({3}), {1, 1, 1});
  check_values(full({2}, 2.5), {2.5, 2.5});
  check_values(arange(0.0, 1.0, 0.25), {0, 0.25, 0.5, 0.75});
  Tensor i = arange(4);
  BOOST_CHECK(i.dtype() == DType::i64);
  check_values(i, {0, 1, 2, 3});
  Tensor t = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  BOOST_CHECK(t.shape() == Shape({2, 3}));
  BOOST_CHECK_EQUAL(t.numel(), 6);
  BOOST_CHECK_CLOSE(scalar_tensor(3.25).item(), 3.25, 1e-9);
  check_error([] { tensor({1, 2, 3}, {2, 2}); }, {"tensor", "[2,2]"});
  check_error([] { zeros({2, 2}).item(); }, {"item", "[2,2]"});
}

BOOST_AUTO_TEST_CASE(random_is_seeded_and_has_the_right_moments) {
  manual_seed(3);
  Tensor a = randn({20000});
  manual_seed(3);
  Tensor b = randn({20000});
  check_values(a, b.to_vector<double>(), 0);
  // mean ~ 0 and variance ~ 1 within a few standard errors
  BOOST_CHECK_SMALL(mean(a).item(), 0.05);
  BOOST_CHECK_CLOSE(var(a).item(), 1.0, 5.0);
  Tensor u = rand({20000});
  BOOST_CHECK_GE(amin(u).item(), 0.0);
  BOOST_CHECK_LT(amax(u).item(), 1.0);
  BOOST_CHECK_CLOSE(mean(u).item(), 0.5, 3.0);
  // counters advance: two draws differ
  BOOST_CHECK_NE(rand({1}).item(), rand({1}).item());
}

// The CPU fill draws four Bernoulli values per Philox block (threads may split a block); every
// element must equal philox::bernoulli computed on its own, for any offset and thread count,
// and the rate must be p.
BOOST_AUTO_TEST_CASE(bernoulli_fills_match_the_elementwise_definition) {
  // float32 takes the sixteen-block AVX-512 path where the CPU has it, float64 the plain loop;
  // an offset just below 2^32 makes the counters' low word wrap inside a group of sixteen, and a
  // seed above 2^32 uses both key words. Kept elements hold `value` (dropout's is 1 / (1 - p)).
  const int saved = num_threads();
  const uint64_t wraps = (uint64_t(1) << 32) - 37;
  const uint64_t threshold = philox::bernoulli_threshold(0.3);
  for (int threads : {1, 2})
    for (DType dtype : {DType::f32, DType::f64})
      for (uint64_t offset : {uint64_t(0), uint64_t(1), uint64_t(3), uint64_t(6), wraps})
        for (uint64_t seed : {uint64_t(77), (uint64_t(5) << 40) + 3}) {
          set_num_threads(threads);
          const double value = offset % 2 ? 1.0 : 1 / 0.7;
          const double kept = dtype == DType::f32 ? double(float(value)) : value;
          const int64_t n = 50003;  // several parallel ranges, not a multiple of 4
          Tensor t = Tensor::empty({n}, {dtype});
          backend_for(Device::cpu()).random_bernoulli(t, seed, offset, 0.3, value);
          std::vector<double> got = t.to_vector<double>();
          int64_t ones = 0, wrong = 0;
          for (int64_t i = 0; i < n; ++i) {
            const bool draw = philox::bernoulli(seed, offset, uint64_t(i), threshold);
            wrong += got[size_t(i)] != (draw ? kept : 0.0);
            ones += draw;
          }
          BOOST_TEST(wrong == 0, threads << " threads, " << dtype_name(dtype) << ", offset "
                                         << offset << ", seed " << seed);
          BOOST_TEST(double(ones) / double(n) == 0.3, boost::test_tools::tolerance(0.02));
        }
  set_num_threads(saved);
  // p = 0 and p = 1 are exact
  BOOST_TEST(sum(bernoulli({1000}, 0.0)).item() == 0.0);
  BOOST_TEST(sum(bernoulli({1000}, 1.0)).item() == 1000.0);
}

BOOST_AUTO_TEST_CASE(bernoulli_ranges_are_stretches_of_the_whole_fill) {
  // What a kernel drawing its mask piecewise gets (nn/efficient_attention.cpp): ranges starting
  // at every position in a block, short (inside one block) to long (several sixteen-block AVX-512
  // groups), equal to the elementwise definition, in float32 and float64.
  const uint64_t seed = 1234, offset = 5, threshold = philox::bernoulli_threshold(0.6);
  for (uint64_t first : {0, 1, 2, 3, 4, 61, 1022})
    for (int64_t count : {0, 1, 3, 4, 5, 63, 64, 65, 67, 200, 333}) {
      std::vector<float> f(size_t(count) + 1, -1.0f);
      std::vector<double> d(size_t(count) + 1, -1.0);
      cpu::fill_bernoulli_range(f.data(), seed, offset, first, count, threshold, 2.5f);
      cpu::fill_bernoulli_range(d.data(), seed, offset, first, count, threshold, 2.5);
      int64_t wrong = 0;
      for (int64_t j = 0; j < count; ++j) {
        const double want =
            philox::bernoulli(seed, offset, first + uint64_t(j), threshold) ? 2.5 : 0.0;
        wrong += f[size_t(j)] != want || d[size_t(j)] != want;
      }
      BOOST_TEST(wrong == 0, "first " << first << ", count " << count);
      BOOST_TEST((f[size_t(count)] == -1.0f && d[size_t(count)] == -1.0),
                 "wrote past the range: first " << first << ", count " << count);
    }
}

BOOST_AUTO_TEST_CASE(views_share_storage) {
  Tensor t = arange(0.0, 12.0, 1.0).reshape({3, 4});
  Tensor tt = t.transpose(0, 1);
  BOOST_CHECK(tt.same_storage(t));
  BOOST_CHECK(!tt.is_contiguous());
  BOOST_CHECK(tt.shape() == Shape({4, 3}));
  check_values(tt.contiguous().reshape({-1}), {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  Tensor n = t.narrow(1, 1, 2);
  check_values(n, {1, 2, 5, 6, 9, 10});
  BOOST_CHECK(n.same_storage(t));
  Tensor e = tensor({1, 2, 3}, {3, 1}).expand({3, 4});
  BOOST_CHECK_EQUAL(e.strides()[1], 0);
  check_values(e, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  check_values(select(t, 0, 1), {4, 5, 6, 7});
  BOOST_CHECK(t.unsqueeze(0).shape() == Shape({1, 3, 4}));
  BOOST_CHECK(t.unsqueeze(0).squeeze(0).shape() == Shape({3, 4}));
  BOOST_CHECK(t.reshape({2, -1, 2}).shape() == Shape({2, 3, 2}));
  BOOST_CHECK(flatten(zeros({2, 3, 4}), 1).shape() == Shape({2, 12}));
  // a view of a view keeps the offset right
  check_values(t.narrow(0, 1, 2).narrow(1, 2, 2), {6, 7, 10, 11});
  // writing through a view changes the base
  copy_(t.narrow(1, 0, 1), zeros({3, 1}));
  check_values(t.narrow(1, 0, 1), {0, 0, 0});
  copy_(t.narrow(0, 0, 1), full({1, 4}, 9));
  check_values(t.narrow(0, 0, 1), {9, 9, 9, 9});
}

BOOST_AUTO_TEST_CASE(copy_between_overlapping_views_reads_the_source_first) {
  // x[1:] = x[:-1] must shift x, as if the source were read before any write. A strided copy
  // runs forward, so without care each write feeds the next read (all of column 0 would become 0).
  Tensor x = arange(0.0, 20.0, 1.0).reshape({10, 2});
  copy_(select(x.narrow(0, 1, 9), 1, 0), select(x.narrow(0, 0, 9), 1, 0));
  check_values(select(x, 1, 0), {0, 0, 2, 4, 6, 8, 10, 12, 14, 16});
  check_values(select(x, 1, 1), {1, 3, 5, 7, 9, 11, 13, 15, 17, 19});
  // contiguous and large: the copy is split across threads
  const int64_t n = int64_t(1) << 20;
  Tensor y = arange(0.0, double(n), 1.0);
  copy_(y.narrow(0, 1, n - 1), y.narrow(0, 0, n - 1));
  std::vector<double> shifted = y.to_vector<double>();
  int64_t wrong = shifted[0] != 0;
  for (int64_t i = 1; i < n; ++i) wrong += shifted[size_t(i)] != double(i - 1);
  BOOST_TEST(wrong == 0);
  // a view copied onto itself stays as it is
  copy_(x, x);
  check_values(select(x, 1, 1), {1, 3, 5, 7, 9, 11, 13, 15, 17, 19});
  // a destination whose elements share memory is refused, by name
  try {
    copy_(zeros({3}).expand({4, 3}), ones({4, 3}));
    BOOST_FAIL("copy_ wrote into an expanded view");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("copy_") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("share memory") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(reshape_views_when_it_can_and_copies_when_it_must) {
  Tensor t = arange(0.0, 24.0, 1.0).reshape({2, 3, 4});
  Tensor p = t.permute({1, 0, 2});  // [3,2,4], last dim still contiguous
  Tensor split_last = p.reshape({3, 2, 2, 2});
  BOOST_CHECK(split_last.same_storage(t));  // splitting a dim never needs a copy
  check_values(split_last.narrow(0, 1, 1), {4, 5, 6, 7, 16, 17, 18, 19});
  Tensor merged = t.narrow(2, 0, 4).reshape({6, 4});  // merging contiguous leading dims
  BOOST_CHECK(merged.same_storage(t));
  Tensor copied = p.reshape({3, 8});  // dims 1,2 of p are not contiguous together
  BOOST_CHECK(!copied.same_storage(t));
  check_values(copied.narrow(0, 0, 1), {0, 1, 2, 3, 12, 13, 14, 15});
  Tensor tt = t.transpose(1, 2);  // [2,4,3]
  Tensor flat = tt.reshape({-1});
  BOOST_CHECK(!flat.same_storage(t));
  check_values(flat.narrow(0, 0, 6), {0, 4, 8, 1, 5, 9});
  check_error([&] { view(tt, {-1}); }, {"view", "contiguous"});
  check_error([&] { t.reshape({5, 5}); }, {"reshape", "[2,3,4]", "[5,5]"});
  check_error([&] { t.reshape({-1, -1}); }, {"reshape", "-1"});
}

BOOST_AUTO_TEST_CASE(dtype_conversion) {
  Tensor t = tensor({1.5, -2.25, 3.0});
  check_values(t.to(DType::f64), {1.5, -2.25, 3.0}, 0);
  check_values(t.to(DType::i64), {1, -2, 3}, 0);
  // float -> int: NaN gives 0, values out of range the nearest end (as a GPU converts; in C++ the
  // cast is undefined there), the rest truncate toward zero
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  Tensor odd = tensor({nan, inf, -inf, 1e19, -1e19, -9.9, 127.9, -128.9, 300.0});
  std::vector<double> as_i64 = odd.to(DType::i64).to_vector<double>();
  const double big = 9223372036854775807.0;  // INT64_MAX, as a double (2^63)
  std::vector<double> want_i64 = {0, big, -big, big, -big, -9, 127, -128, 300};
  for (size_t i = 0; i < want_i64.size(); ++i)
    BOOST_TEST(as_i64[i] == want_i64[i], "int64 element " << i);
  check_values(odd.to(DType::i8), {0, 127, -128, 127, -128, -9, 127, -128, 127}, 0);
  check_values(t.to(DType::b8), {1, 1, 1}, 0);
  check_values(t.to(DType::bf16).to(DType::f32), {1.5, -2.25, 3.0}, 0);
  // bf16 keeps 8 significant bits: 1 + 2^-9 rounds to 1
  check_values(tensor({1.0 + 1.0 / 512}).to(DType::bf16).to(DType::f32), {1.0}, 0);
  check_error([] { tensor({1.0}).to(DType::i64).requires_grad_(); }, {"requires_grad", "int64"});
}

BOOST_AUTO_TEST_CASE(printing_looks_like_pytorch) {
  BOOST_CHECK_EQUAL(tensor({1, 2.5}).str(), "tensor([1.0000, 2.5000])");
  BOOST_CHECK_EQUAL(tensor({1, 2, 3, 4}, {2, 2}).str(),
                    "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]])");
  BOOST_CHECK_EQUAL(tensor_i64({1, 2}).str(), "tensor([1, 2])");
  BOOST_CHECK_EQUAL(tensor({1}, {1}, {DType::f64}).str(), "tensor([1.0000], dtype=float64)");
  Tensor w = ones({1}, {.requires_grad = true});
  BOOST_CHECK_EQUAL(w.str(), "tensor([1.0000], requires_grad=True)");
  BOOST_CHECK_EQUAL(mul(w, 2.0).str(), "tensor([2.0000], grad_fn=<mul_scalar>)");
  BOOST_CHECK_EQUAL(gt(tensor({1, -1}), 0.0).str(), "tensor([True, False])");
}

BOOST_AUTO_TEST_CASE(caching_allocator_reuses_blocks) {
  Backend& cpu = backend_for(Device::cpu());
  { Tensor warm = zeros({1 << 18}); }
  MemoryStats before = cpu.memory_stats();
  { Tensor t = zeros({1 << 18}); }  // same bucket: must come from the cache
  MemoryStats after = cpu.memory_stats();
  BOOST_CHECK_EQUAL(after.allocations - before.allocations, 1u);
  BOOST_CHECK_EQUAL(after.cache_hits - before.cache_hits, 1u);
  BOOST_CHECK_EQUAL(after.bytes_in_use, before.bytes_in_use);
  cpu.reset_peak_memory();
  size_t base = cpu.memory_stats().peak_bytes;
  { Tensor big = zeros({1 << 20}); }  // 4 MiB
  BOOST_CHECK_GE(cpu.memory_stats().peak_bytes - base, size_t(4) << 20);
}

// Under ASan (make sanitize) the allocator poisons what no tensor may touch: the bucket's slack
// past the bytes asked for, and a whole block once it is back in the cache. Skipped elsewhere.
boost::test_tools::assertion_result built_with_asan(boost::unit_test::test_unit_id) {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  boost::test_tools::assertion_result result(false);
  result.message() << "built without AddressSanitizer (make sanitize runs it)";
  return result;
#endif
}

BOOST_AUTO_TEST_CASE(caching_allocator_poisons_slack_and_cached_blocks,
                     *boost::unit_test::precondition(built_with_asan)) {
#if defined(__SANITIZE_ADDRESS__)
  const char* data;
  {
    Tensor t = zeros({10});  // 40 bytes in a larger bucket
    data = static_cast<const char*>(t.raw_data());
    BOOST_TEST(!__asan_address_is_poisoned(data));
    BOOST_TEST(!__asan_address_is_poisoned(data + 39));
    BOOST_TEST(__asan_address_is_poisoned(data + 40));
  }
  BOOST_TEST(__asan_address_is_poisoned(data));  // cached: a use after free is reported
  Tensor again = zeros({12});                    // the same bucket, from the cache
  BOOST_TEST(static_cast<const char*>(again.raw_data()) == data);
  BOOST_TEST(!__asan_address_is_poisoned(data + 47));
  BOOST_TEST(__asan_address_is_poisoned(data + 48));
#endif
}

BOOST_AUTO_TEST_SUITE_END()
