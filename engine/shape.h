// Shapes and strides: small integer vectors and the arithmetic on them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/small_vector.h"

namespace qkv {

// Ranks up to this many are stored inside the Shape itself (no heap allocation): see
// small_vector.h. Larger ranks work too, on the heap.
constexpr size_t kInlineRank = 6;

using Shape = SmallVector<int64_t, kInlineRank>;
using Strides = SmallVector<int64_t, kInlineRank>;

constexpr int kMaxRank = 8;

int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2,3,64]"

// NumPy broadcasting of two shapes; throws qkv::Error naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Turns a possibly negative dim into [0, rank); throws naming `op` when out of range.
int normalize_dim(int dim, int rank, const char* op);

// A contiguous shape seen as three dims around `dim` (in [0, rank)): the product of the dims
// before it, its size (1 for a scalar) and the product of the dims after it. The indexing
// kernels of every backend address their operands this way.
struct Split3 {
  int64_t outer = 1, mid = 1, inner = 1;
};
inline Split3 split_at(const Shape& shape, int dim) {
  Split3 s;
  for (int d = 0; d < dim; ++d) s.outer *= shape[d];
  s.mid = shape.empty() ? 1 : shape[dim];
  for (size_t d = dim + 1; d < shape.size(); ++d) s.inner *= shape[d];
  return s;
}

}  // namespace qkv
