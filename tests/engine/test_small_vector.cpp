// SmallVector (the type of Shape and Strides) against std::vector: the same random sequence of
// operations on both must leave the same contents, across the inline/heap boundary and back.
#include <boost/test/unit_test.hpp>
#include <random>
#include <vector>

#include "engine/small_vector.h"

using namespace qkv;

BOOST_AUTO_TEST_SUITE(small_vector)

using Small = SmallVector<int64_t, 4>;

static bool same(const Small& s, const std::vector<int64_t>& v) {
  return std::vector<int64_t>(s.begin(), s.end()) == v;
}

BOOST_AUTO_TEST_CASE(random_operations_match_std_vector) {
  std::mt19937 rng(11);
  auto pick = [&](size_t n) { return size_t(rng() % (n + 1)); };
  for (int trial = 0; trial < 200; ++trial) {
    Small s;
    std::vector<int64_t> v;
    for (int step = 0; step < 60; ++step) {
      const int64_t x = int64_t(rng() % 1000);
      switch (rng() % 9) {
        case 0:
        case 1:
          s.push_back(x), v.push_back(x);
          break;
        case 2: {  // insert one at a random place
          const size_t at = pick(v.size());
          s.insert(s.begin() + at, x), v.insert(v.begin() + long(at), x);
          break;
        }
        case 3: {  // insert a range taken from the vector itself (aliasing)
          const size_t at = pick(v.size()), from = pick(v.size()),
                       to = from + pick(v.size() - from);
          s.insert(s.begin() + at, s.begin() + from, s.begin() + to);
          std::vector<int64_t> copy(v.begin() + long(from), v.begin() + long(to));
          v.insert(v.begin() + long(at), copy.begin(), copy.end());
          break;
        }
        case 4:
          if (!v.empty()) {
            const size_t at = pick(v.size() - 1);
            s.erase(s.begin() + at), v.erase(v.begin() + long(at));
          }
          break;
        case 5: {
          const size_t from = pick(v.size()), to = from + pick(v.size() - from);
          s.erase(s.begin() + from, s.begin() + to);
          v.erase(v.begin() + long(from), v.begin() + long(to));
          break;
        }
        case 6: {
          const size_t n = pick(9);
          s.resize(n, x), v.resize(n, x);
          break;
        }
        case 7: {  // copies and moves keep the contents and leave the source usable
          Small copy = s;
          Small moved = std::move(copy);
          BOOST_REQUIRE(copy.empty());
          copy.push_back(x);
          BOOST_REQUIRE_EQUAL(copy.size(), 1u);
          s = moved;
          break;
        }
        default:
          if (!v.empty()) s.pop_back(), v.pop_back();
      }
      s.push_back(s.empty() ? 0 : s.back());  // push_back of its own element, maybe regrowing
      v.push_back(v.empty() ? 0 : v.back());
      BOOST_REQUIRE_MESSAGE(same(s, v), "trial " << trial << " step " << step);
    }
  }
}

BOOST_AUTO_TEST_CASE(constructors_comparison_and_inline_storage) {
  const Small a{1, 2, 3};
  BOOST_CHECK(same(a, {1, 2, 3}));
  BOOST_CHECK(same(Small(3, 7), {7, 7, 7}));
  BOOST_CHECK(same(Small(std::vector<int64_t>{4, 5}), {4, 5}));
  BOOST_CHECK(same(Small(a.begin() + 1, a.end()), {2, 3}));
  BOOST_CHECK(a == Small({1, 2, 3}));
  BOOST_CHECK(a != Small({1, 2}));
  BOOST_CHECK(Small({1, 2}) < a);
  BOOST_CHECK_EQUAL(a.capacity(), 4u);  // within N: no heap buffer
  Small big{1, 2, 3, 4, 5};
  BOOST_CHECK_GE(big.capacity(), 5u);
  Small moved = std::move(big);  // a heap buffer changes hands
  BOOST_CHECK(same(moved, {1, 2, 3, 4, 5}));
  BOOST_CHECK(big.empty());
  BOOST_CHECK_EQUAL(big.capacity(), 4u);
}

BOOST_AUTO_TEST_SUITE_END()
