// Walking several same-shaped strided tensors together, the loop behind every elementwise kernel.
//
// The shape is first simplified: adjacent dimensions that are contiguous in every operand are
// merged, so contiguous tensors become one flat loop and a broadcast bias becomes a 2-D loop. The
// flat element range is then split across the thread pool; each chunk finds its starting
// multi-index once and walks forward row by row, handing the innermost run to `inner` with each
// operand's offset and stride so the hot loop is a plain pointer walk the compiler can vectorize.
#pragma once

#include <array>
#include <cstdint>

#include "engine/parallel.h"
#include "engine/shape.h"

namespace qkv::cpu {

template <size_t N>
struct LoopShape {
  Shape shape;
  std::array<Strides, N> strides;
};

template <size_t N>
LoopShape<N> coalesce(const Shape& shape, const std::array<Strides, N>& strides) {
  LoopShape<N> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // size-1 dims never move the offsets
    bool merge = !out.shape.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = out.strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      out.shape.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) out.strides[k].back() = strides[k][d];
    } else {
      out.shape.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) out.strides[k].push_back(strides[k][d]);
    }
  }
  if (out.shape.empty()) {  // a scalar, or all dims of size 1
    out.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back(0);
  }
  return out;
}

// inner(offsets, count, inner_strides): process `count` elements starting at the given element
// offsets, stepping each operand by its inner stride.
template <size_t N, typename Inner>
void strided_loop(const Shape& shape, const std::array<Strides, N>& strides, Inner&& inner,
                  int64_t grain = 32768) {
  int64_t total = numel(shape);
  if (total == 0) return;
  LoopShape<N> ls = coalesce(shape, strides);
  const int rank = int(ls.shape.size());
  const int64_t row = ls.shape[rank - 1];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = ls.strides[k][rank - 1];
  parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    int64_t index[kMaxRank] = {};
    int64_t rem = begin;
    for (int d = rank - 1; d >= 0; --d) {
      index[d] = rem % ls.shape[d];
      rem /= ls.shape[d];
    }
    std::array<int64_t, N> offsets{};
    for (size_t k = 0; k < N; ++k)
      for (int d = 0; d < rank; ++d) offsets[k] += index[d] * ls.strides[k][d];
    int64_t pos = begin;
    while (pos < end) {
      int64_t count = std::min(row - index[rank - 1], end - pos);
      inner(offsets, count, inner_strides);
      pos += count;
      // advance the multi-index by `count` (to the start of the next row, or to `end`)
      index[rank - 1] += count;
      for (size_t k = 0; k < N; ++k) offsets[k] += count * inner_strides[k];
      for (int d = rank - 1; d > 0 && index[d] == ls.shape[d]; --d) {
        index[d] = 0;
        ++index[d - 1];
        for (size_t k = 0; k < N; ++k)
          offsets[k] += ls.strides[k][d - 1] - ls.shape[d] * ls.strides[k][d];
      }
    }
  });
}

}  // namespace qkv::cpu
