// A sum the compiler can vectorize without reordering it behind our back.
#pragma once

#include <cstdint>

namespace qkv::cpu {

// The sum of term(c) for c < n, kept as sixteen partial sums (one per vector lane) that are added
// up at the end. A single running sum puts one add per element on the critical path and cannot be
// vectorized without reordering it; this order is fixed, so results stay deterministic. (An `omp
// simd reduction` here is not vectorized by GCC inside the dispatch macro's lambda.) Float rows sum
// in float, as PyTorch's CPU kernels do: sixteen lanes of at most n / 16 terms each, then a
// pairwise total, lose a few ulps where double lanes would halve the vector width and add a
// conversion per element. Acc = double sums float terms in double.
template <typename Acc, typename Term>
Acc lane_sum(int64_t n, Term term) {
  constexpr int64_t kLanes = 16;
  Acc part[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) part[l] += term(c + l);
  for (; c < n; ++c) part[0] += term(c);
  // pairwise, halving: four dependent vector adds instead of fifteen dependent scalar ones
  for (int64_t half = kLanes / 2; half > 0; half /= 2)
    for (int64_t l = 0; l < half; ++l) part[l] += part[l + half];
  return part[0];
}

}  // namespace qkv::cpu
