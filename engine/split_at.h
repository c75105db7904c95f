// Split3 / split_at: a shape as [outer, size along dim, inner], for indexing kernels.
#pragma once

#include <cstdint>

#include "engine/shape.h"

namespace qkv {

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

// The same around the dims [first, last]: their product in the middle (1 for an empty range,
// last = first - 1). The reductions' kernels, and their gradients', address a block reduced over
// adjacent dims this way.
inline Split3 split_at(const Shape& shape, int first, int last) {
  Split3 s;
  for (int d = 0; d < first; ++d) s.outer *= shape[d];
  for (int d = first; d <= last; ++d) s.mid *= shape[d];
  for (size_t d = last + 1; d < shape.size(); ++d) s.inner *= shape[d];
  return s;
}

}  // namespace qkv
