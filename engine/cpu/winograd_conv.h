// A 3x3 convolution at stride 1 with padding 1 by Winograd's minimal filtering, F(2x2, 3x3), in
// float32 on AVX-512: the CPU conv2d's path (conv2d_kernels.cpp) for the CNN's 3x3 layers, their
// forward and, since gx at stride 1 is the forward of gy by the flipped kernel, their gx.
//
// Why: the direct convolution (direct_conv.h) spends 9 C multiply-adds on each output; F(2x2,
// 3x3) gives a 2x2 block of outputs from a 4x4 block of input with 16 C, 2.25x fewer. Each 4x4
// input tile d is transformed to V = B^T d B, each 3x3 kernel g to U = G g G^T, and the 2x2
// outputs are Y = A^T (sum over c of U[o][c] * V[c]) A, with
//
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1].
//
// The sum over c, for each of the 16 elements xi of a transformed tile, is a product M[xi] =
// U[xi] @ V[xi] ([O, C] by [C, tiles]), which is where the arithmetic goes: register tiles of 8
// output channels x 48 tiles, the tiles across the lanes. The transforms are additions on whole
// rows of tiles: an image's tile row (up to 14 tiles, rows of W <= 28) is one vector.
//
// The values are not the direct convolution's bits: the transforms add and subtract before the
// products. They are no less accurate against float64 loops (the conv_kernels test holds their
// error to twice the direct convolution's; docs/CPU_KERNELS.md has both). Each tile's sums run in
// a fixed order, whatever group of images it is in, so a result does not depend on the thread
// count.
#pragma once

#include <cstdint>

#include "engine/cpu/prefetch.h"

namespace qkv::cpu {

// The sizes of a group of `images` images: C channels of H x W in, O channels of H x W out, each
// in th x tw tiles of 2x2 outputs (the last row or column of tiles half outside when H or W is
// odd), T = images * th * tw of them numbered row by row through the images one after the other,
// Ts rounded up to whole vectors. The products run on the group's tiles together: at 7 x 7 an
// image has 16 tiles, one vector, and a register tile of one vector waits on its broadcasts. V's
// and M's 16 planes lie a line more than their C Ts or O Ts floats apart: each row of tiles
// stores one vector to each plane, and 16 planes a multiple of 4 KB apart (C Ts = 1024 at 7 x 7
// with 64 channels) would fall in one set of the L1, which holds 12 lines.
struct WinogradShape {
  int64_t C, H, W, O, images;
  int64_t th, tw, T, Ts;
  int64_t v_plane, m_plane;
  WinogradShape(int64_t C, int64_t H, int64_t W, int64_t O, int64_t images);
  // The group size for batches of these images: enough for about 10 vectors of tiles, as long as
  // V and M stay within 768 KB of the L2.
  static int64_t group(int64_t C, int64_t H, int64_t W, int64_t O);
  // The transformed weights U [16, C, O].
  int64_t weight_floats() const { return 16 * C * O; }
  // Scratch a group needs: V [16, C, Ts] and M [16, O, Ts], each plane padded.
  int64_t scratch_floats() const { return 16 * (v_plane + m_plane); }
};

// Which shapes take the kernel: none (for tests: send every shape to the direct convolution, to
// compare the two), those where it was measured faster than the direct convolution (the default),
// or every shape it can take (for the benchmark to show where it is not faster).
enum class WinogradUse { off, where_faster, always };
void set_winograd_conv_use(WinogradUse use);

// Whether a shape takes the kernel, on a CPU with AVX-512F: one it can take (a tile row in one
// vector: W <= 28) and, by default, where it was measured faster than the direct convolution (16
// or more channels each way, and 64 in all or 196 positions).
bool winograd_conv_takes(int64_t C, int64_t H, int64_t W, int64_t O);

// u [16, C, O] = G g G^T of each kernel g of the weights transposed to wt [C * 9, O] (row (c * 3
// + i) * 3 + j holds tap (i, j) of channel c), the layout the direct convolution reads.
void winograd_weights(const WinogradShape& s, const float* wt, float* u);

// y [images, O, H, W] of a group x [images, C, H, W]; bias [O] or null; scratch of
// scratch_floats(). `ahead` (the next group's input and output) is asked for a line at a time
// during the products.
void winograd_conv_forward(const WinogradShape& s, const float* x, const float* u,
                           const float* bias, float* y, float* scratch, PrefetchAhead ahead = {});

}  // namespace qkv::cpu
