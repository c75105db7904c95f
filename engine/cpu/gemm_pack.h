// Packing: copying a block of an operand into the order the microkernel reads it.
//
// The microkernel walks k and, at each step, wants the next few values of a handful of rows of A
// (or columns of B) side by side. In the caller's matrix those values are a stride apart, and
// transposed operands put them even further apart. Copying a block once into micro-panels makes
// every load of the hot loop contiguous and aligned, turns transposes into plain reads, and
// zero-pads ragged edges so the kernel never needs a bounds check.
#pragma once

#include <cstdint>

namespace qkv::cpu {

// Packs `lines` lines of `depth` values into panels of `width` lines each. Value (line q, depth p)
// is src[q * line_stride + p * depth_stride]; panel t is stored depth-major at
// dst + t * width * depth, as dst[p * width + (q - t * width)]. Lines past `lines` in the last
// panel are zero. Strides may be 0 (a broadcast operand) and are never multiplied by an index that
// is out of range, so any stride is fine along a dimension of size 1.
//
// A block of op(A) is packed with lines = rows of A, B with lines = columns of B, so the same
// routine serves both operands and all four transpose combinations.
template <typename T>
using PackTransposed = void (*)(const T* src, int64_t line_stride, int64_t lines, int64_t depth,
                                int width, T* dst);

// `transposed`, when given, packs one panel whose lines are contiguous along depth (depth_stride
// == 1) faster than the portable loop; see gemm_pack_avx512.cpp.
template <typename T>
void pack_panels(const T* src, int64_t line_stride, int64_t depth_stride, int64_t lines,
                 int64_t depth, int width, T* dst, PackTransposed<T> transposed = nullptr);

// One panel: lines <= width lines, line q at src + q * line_stride, contiguous along depth;
// lines past `lines` are packed as zero. Only for CPUs with AVX-512.
template <typename T>
void pack_transposed_avx512(const T* src, int64_t line_stride, int64_t lines, int64_t depth,
                            int width, T* dst);

}  // namespace qkv::cpu
