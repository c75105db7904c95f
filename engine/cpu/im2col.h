// im2col and col2im over the planes of one image (or any run of planes), on the calling thread:
// the serial loops under the Backend's im2col / col2im kernels and the CPU's conv2d
// (conv2d_kernels.cpp), which runs them image by image on a block of cols small enough to stay in
// the L2 cache.
#pragma once

#include <cstdint>

#include "engine/backend.h"

namespace qkv::cpu {

// cols[(c * kh + i) * kw + j][oh * Wo + ow] = x[c][oh * sh - ph + i * dh][ow * sw - pw + j * dw]
// for the `planes` planes c of x (each H x W), or pad outside the input.
template <typename T>
void im2col_planes(const T* x, int64_t planes, int64_t H, int64_t W, const Window2d& w, T* cols,
                   T pad);

// The adjoint: x[c][h][w] += every entry of cols that im2col_planes read from it.
template <typename T>
void col2im_planes(const T* cols, int64_t planes, int64_t H, int64_t W, const Window2d& w, T* x);

// The same sums from columns the caller owns and no longer needs (the CPU's conv2d scratch): it
// may overwrite cols, which lets stride-1 windows whose output is as wide as the input add each
// tap's row as one contiguous range (its entries at padding positions set to zero first).
template <typename T>
void col2im_planes_overwriting(T* cols, int64_t planes, int64_t H, int64_t W, const Window2d& w,
                               T* x);

}  // namespace qkv::cpu
