// Helpers for the MPI suite: the world group, data that tells summation orders apart, bitwise
// comparison.
#pragma once

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/process_group.h"

namespace qkv::test {

inline ProcessGroup& world() { return *ProcessGroup::from_environment(); }

// Runs `body`; an exception ends the job (all ranks) with one line naming the rank, instead of
// leaving the other ranks blocked in the collective this rank will now never call.
inline void on_every_rank(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv: rank %d of %d: %s\n", world().rank(), world().size(), e.what());
    std::fflush(stderr);
    world().abort(1);
  }
}

// Element i of rank r's tensor: magnitudes from 1e-3 to 1e7 and both signs, so that adding the
// same values in another order rounds differently for many elements.
inline double spread_value(int rank, int64_t i) {
  uint64_t h = uint64_t(i) * 0x9E3779B97F4A7C15ull + uint64_t(rank + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  double mantissa = 1.0 + double(h % 1000003) / 1000003.0;
  int exponent = int((h >> 20) % 11) - 3;
  double sign = (h >> 40) & 1 ? -1.0 : 1.0;
  return sign * mantissa * std::pow(10.0, exponent);
}

template <typename T>
std::vector<T> spread_values(int rank, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = T(spread_value(rank, i));
  return v;
}

// Elements whose bits differ (a float compared with == would call -0 and 0 equal).
template <typename T>
int64_t bits_differ(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return int64_t(std::max(a.size(), b.size()));
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return n;
}

}  // namespace qkv::test

namespace qkv::test {

template <typename T>
DType dtype_for() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  return DType::i64;
}

// A 1-D CPU tensor holding exactly these values.
template <typename T>
Tensor from_values(const std::vector<T>& values) {
  Tensor t = Tensor::empty({int64_t(values.size())}, dtype_for<T>());
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace qkv::test
