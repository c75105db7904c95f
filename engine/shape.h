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

}  // namespace qkv
