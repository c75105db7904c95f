// Strided operands on the GPU: shapes and strides passed to a kernel by value.
//
// The host first merges dimensions that are contiguous in every operand (the CPU loop's coalesce),
// so contiguous tensors arrive as one flat dimension and a broadcast bias as two; the kernel then
// turns a flat element index into one offset per operand with one division per remaining dim.
#pragma once

#include <array>
#include <cstdint>

#include "engine/cpu/strided_loop.h"  // coalesce: the same dimension merging as the CPU loops
#include "engine/shape.h"

namespace qkv::cuda {

template <int N>
struct StridedLayout {
  int rank = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t strides[N][kMaxRank] = {};
};

template <int N>
StridedLayout<N> make_layout(const Shape& shape, const std::array<Strides, N>& strides) {
  auto merged = cpu::coalesce<N>(shape, strides);
  StridedLayout<N> layout;
  layout.rank = int(merged.shape.size());
  for (int d = 0; d < layout.rank; ++d) {
    layout.sizes[d] = merged.shape[d];
    for (int k = 0; k < N; ++k) layout.strides[k][d] = merged.strides[k][d];
  }
  return layout;
}

// Element offsets of flat (row-major) index `linear` in each of the N operands.
template <int N>
__device__ inline void offsets_of(const StridedLayout<N>& layout, int64_t linear,
                                  int64_t (&offsets)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) offsets[k] = 0;
  for (int d = layout.rank - 1; d > 0; --d) {
    const int64_t i = linear % layout.sizes[d];
    linear /= layout.sizes[d];
#pragma unroll
    for (int k = 0; k < N; ++k) offsets[k] += i * layout.strides[k][d];
  }
#pragma unroll
  for (int k = 0; k < N; ++k) offsets[k] += linear * layout.strides[k][0];
}

}  // namespace qkv::cuda
