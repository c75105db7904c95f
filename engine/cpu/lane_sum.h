// A sum the compiler can vectorize without reordering it behind our back.
#pragma once

#include <cstdint>

namespace qkv::cpu {

// Sixteen lanes (one vector value of GCC's and clang's vector extension) combined pairwise,
// halving: lane l with lane l + 8, then + 4, + 2, + 1, by combine(a, b) on the halves. For a sum
// that is four dependent vector adds instead of fifteen dependent scalar ones.
// The steps after the first, on its eight results h[l] = combine(lane l, lane l + 8): for sixteen
// lanes kept as two vectors of eight (sixteen doubles are two registers), whose first step is
// combine(low, high).
template <typename Acc, typename Half, typename Combine>
Acc combine_halves_pairwise(Half h, Combine combine) {
  static_assert(sizeof(Half) == 8 * sizeof(Acc));
  typedef Acc Quarter __attribute__((vector_size(4 * sizeof(Acc))));
  typedef Acc Eighth __attribute__((vector_size(2 * sizeof(Acc))));
  const Quarter q =
      combine(__builtin_shufflevector(h, h, 0, 1, 2, 3), __builtin_shufflevector(h, h, 4, 5, 6, 7));
  const Eighth e =
      combine(__builtin_shufflevector(q, q, 0, 1), __builtin_shufflevector(q, q, 2, 3));
  return combine(e[0], e[1]);
}

template <typename Acc, typename Lanes, typename Combine>
Acc combine_lanes_pairwise(Lanes part, Combine combine) {
  constexpr int kLanes = 16;
  static_assert(sizeof(Lanes) == kLanes * sizeof(Acc));
  return combine_halves_pairwise<Acc>(
      combine(__builtin_shufflevector(part, part, 0, 1, 2, 3, 4, 5, 6, 7),
              __builtin_shufflevector(part, part, 8, 9, 10, 11, 12, 13, 14, 15)),
      combine);
}

// The sum of term(c) for c < n, kept as sixteen partial sums (one per vector lane) that are added
// up at the end. A single running sum puts one add per element on the critical path and cannot be
// vectorized without reordering it; this order is fixed, so results stay deterministic. (An `omp
// simd reduction` here is not vectorized by GCC inside the dispatch macro's lambda.) Float rows sum
// in float, as PyTorch's CPU kernels do: sixteen lanes of at most n / 16 terms each, then a
// pairwise total, lose a few ulps where double lanes would halve the vector width and add a
// conversion per element. Acc = double sums float terms in double.
template <typename Acc, typename Term>
Acc lane_sum(int64_t n, Term term) {
  constexpr int kLanes = 16;
  // The loop keeps the lanes in an array, which GCC vectorizes into one register; the pairwise
  // total takes them as one vector value. Totalled as an array they went through the stack, read
  // back lane by lane, and the per-row total cost more than the row's adds (layer_norm, 128
  // columns).
  typedef Acc Lanes __attribute__((vector_size(kLanes * sizeof(Acc))));
  Acc lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += term(c + l);
  for (; c < n; ++c) lanes[0] += term(c);
  Lanes part;
  __builtin_memcpy(&part, lanes, sizeof part);
  return combine_lanes_pairwise<Acc>(part, [](auto a, auto b) { return a + b; });
}

}  // namespace qkv::cpu
