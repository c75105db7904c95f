// Checks the dropout family's tests share (tests/engine/test_dropout.cpp, test_dropout_add.cpp):
// byte-for-byte comparison, inputs with the values a multiply treats specially, and the profiler's
// one row each way.
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/profiler.h"
#include "tests/engine/helpers.h"

namespace qkv::testing {

// The same bytes, element by element (so -0 differs from 0, and NaNs are compared by their bits).
inline int64_t differing(const Tensor& a, const Tensor& b) {
  BOOST_REQUIRE(a.shape() == b.shape());
  BOOST_REQUIRE(a.dtype() == b.dtype());
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  const size_t size = dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(ac.raw_data());
  const auto* pb = static_cast<const unsigned char*>(bc.raw_data());
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    n += std::memcmp(pa + size_t(i) * size, pb + size_t(i) * size, size) != 0;
  return n;
}

// randn values with a NaN, both infinities and a negative zero among them: a dropped element must
// be x * 0 as the multiply gives it (-0, NaN), not a plain 0.
inline Tensor awkward_input(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  Tensor x = randn(shape, {dtype}, &g);
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), -0.0};
  Tensor flat = x.reshape({-1});
  for (int64_t i = 0; i < 4 && i < x.numel(); ++i)
    copy_(flat.narrow(0, (i * 7919) % x.numel(), 1), full({1}, specials[i], {dtype}));
  return x;
}

// Profiles op (run) forward and backward on a [64, 20, 128] float32 input at one thread: one row
// each way on the issuing thread, charged these bytes an element, and no row of the ops it
// replaces.
inline void check_one_row_each_way(const std::function<Tensor(const Tensor&, Generator&)>& run,
                                   const std::string& op, const std::vector<std::string>& replaced,
                                   double forward_bytes, double backward_bytes) {
  ThreadCount one(1);
  Generator g(2);
  Tensor x = randn({64, 20, 128}).requires_grad_();
  std::vector<ProfileEvent> events;
  {
    Profiler profiler;
    sum(run(x, g)).backward();
    events = profiler.events();
  }
  int forward = 0, backward = 0;
  const double n = 64 * 20 * 128;
  for (const ProfileEvent& e : events) {
    if (e.scope || e.thread != 0) continue;
    BOOST_TEST_INFO(e.name);
    BOOST_TEST(std::count(replaced.begin(), replaced.end(), e.name) == 0);
    if (e.name != op) continue;
    const bool is_forward = e.phase == ProfilePhase::forward;
    BOOST_TEST(e.bytes == n * (is_forward ? forward_bytes : backward_bytes),
               boost::test_tools::tolerance(1e-12));
    (is_forward ? forward : backward) += 1;
  }
  BOOST_TEST(forward == 1);
  BOOST_TEST(backward == 1);
}

}  // namespace qkv::testing
