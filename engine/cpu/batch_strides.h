// Where each matrix of a batched GEMM starts: one stride, or two for a batch laid out as a grid.
//
// Attention multiplies per (batch entry, head). Its q, k and v come out of one projection as
// [B, T, H, d] and are viewed as [B, H, T, d]: heads are d elements apart, batch entries T*H*d,
// and no single stride walks the B*H matrices. With two levels, matrix i of the batch starts at
//   (i / inner_count) * outer + (i % inner_count) * inner,
// so the GEMM reads such operands in place instead of copying them to contiguous memory first.
// One level is the special case inner_count = 1: matrix i starts at i * outer. A stride of 0
// broadcasts an operand along its level (a mask shared by every head, a weight by every entry).
#pragma once

#include <cstdint>

namespace qkv::cpu {

struct BatchStrides {
  int64_t outer = 0;        // between entries of the outer level (the only level when one)
  int64_t inner = 0;        // between entries of the inner level
  int64_t inner_count = 1;  // entries per outer entry, > 0

  // One level, `stride` apart: implicit, so a plain stride reads as what it is.
  BatchStrides(int64_t stride) : outer(stride) {}  // NOLINT(google-explicit-constructor)
  BatchStrides(int64_t outer_stride, int64_t inner_stride, int64_t inner_entries)
      : outer(outer_stride), inner(inner_stride), inner_count(inner_entries) {}

  int64_t offset(int64_t i) const { return (i / inner_count) * outer + (i % inner_count) * inner; }
};

}  // namespace qkv::cpu
