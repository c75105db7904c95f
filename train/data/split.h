// Holding out validation and test examples from one list (a user's corpus has no splits).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/error.h"

namespace qkv::train {

template <typename T>
struct Splits {
  std::vector<T> train, valid, test;
};

// Shuffles `items` with `seed` and cuts off `n_valid` then `n_test` of them; the rest is train.
template <typename T>
Splits<T> holdout_split(const std::vector<T>& items, size_t n_valid, size_t n_test, uint64_t seed) {
  if (n_valid + n_test >= items.size())
    throw Error("split: " + std::to_string(items.size()) + " examples are too few to hold out " +
                std::to_string(n_valid) + " for validation and " + std::to_string(n_test) +
                " for test");
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  Splits<T> s;
  for (size_t k = 0; k < order.size(); ++k) {
    auto& dest = k < n_valid ? s.valid : k < n_valid + n_test ? s.test : s.train;
    dest.push_back(items[order[k]]);
  }
  return s;
}

}  // namespace qkv::train
