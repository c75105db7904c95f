// Small helpers shared by the engine tests.
#pragma once

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/parallel.h"

namespace qkv::testing {

// Restores the thread count a test changed; given a count, sets it for the test's scope first.
struct ThreadCount {
  ThreadCount() = default;
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved); }
  int saved = num_threads();
};

// The same shape and the same values bit for bit (NaN equal to NaN), read as doubles.
inline bool equal_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] && std::signbit(x[i]) == std::signbit(y[i])) &&
        !(std::isnan(x[i]) && std::isnan(y[i])))
      return false;
  return true;
}

// Every element of t within tol of expected (row-major), with a message naming the first miss.
inline void check_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  std::vector<double> got = t.to_vector<double>();
  BOOST_REQUIRE_EQUAL(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok = std::abs(got[i] - expected[i]) <= tol ||
              (std::isnan(got[i]) && std::isnan(expected[i])) || got[i] == expected[i];
    BOOST_CHECK_MESSAGE(ok, "element " << i << ": got " << got[i] << ", expected " << expected[i]);
    if (!ok) return;
  }
}

// A tensor as the middle-axis kernels see it, [outer, reduced, inner].
struct BlockLayout {
  int64_t outer, reduced, inner;
};

// [outer, reduced, inner] values on a coarse grid (ties in most runs), with -inf, +inf and one
// NaN, which makes its run's extreme NaN.
inline Tensor tied_values(const BlockLayout& l, DType dtype) {
  std::vector<double> v =
      randn({l.outer, l.reduced, l.inner}, {.dtype = DType::f64}).to_vector<double>();
  for (double& e : v) e = std::floor(e * 0.75);
  v[1] = -INFINITY;
  v[v.size() / 2] = INFINITY;
  v[v.size() - 2] = std::nan("");
  return tensor(v, {l.outer, l.reduced, l.inner}, {.dtype = dtype});
}

// check(layout, dtype) for every layout, in float32 and float64, at one and at two threads, each
// in a test context naming them.
template <typename Layouts, typename Check>
void for_each_layout_dtype_and_thread_count(const Layouts& layouts, Check check) {
  for (const BlockLayout& l : layouts)
    for (DType dtype : {DType::f32, DType::f64})
      for (int threads : {1, 2}) {
        BOOST_TEST_CONTEXT(l.outer << "x" << l.reduced << "x" << l.inner << " " << dtype_name(dtype)
                                   << " " << threads << " threads") {
          ThreadCount scope(threads);
          check(l, dtype);
        }
      }
}

// A bool tensor (true where v is non-zero) of shape s, for masks.
inline Tensor bool_mask(const std::vector<double>& v, const Shape& s) {
  return tensor(v, s).to(DType::b8);
}

// Runs f and checks it throws qkv::Error whose message contains every fragment.
template <typename F>
void check_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    BOOST_ERROR("expected qkv::Error containing '" << fragments[0] << "'");
  } catch (const qkv::Error& e) {
    std::string msg = e.what();
    for (const auto& frag : fragments)
      BOOST_CHECK_MESSAGE(msg.find(frag) != std::string::npos,
                          "message '" << msg << "' lacks '" << frag << "'");
  }
}

// A predicate for BOOST_CHECK_EXCEPTION: the qkv::Error's message contains every fragment (the
// message is printed when it does not, so a failing case shows what was said instead).
inline auto message_has(std::vector<std::string> fragments) {
  return [fragments = std::move(fragments)](const qkv::Error& e) {
    std::string msg = e.what();
    for (const auto& frag : fragments)
      if (msg.find(frag) == std::string::npos) {
        BOOST_TEST_MESSAGE("message '" << msg << "' lacks '" << frag << "'");
        return false;
      }
    return true;
  };
}

}  // namespace qkv::testing
