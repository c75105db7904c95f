// A 1x1 convolution without padding, in float32 on AVX-512 registers: the CPU conv2d's path
// (conv2d_kernels.cpp) for the residual shortcuts, [N, C, H, W] -> [N, O, Ho, Wo] at stride s.
//
// Why it exists: such a layer is a product per image, y[n] = W @ xs[n] with xs[n] the input's
// [C, Ho * Wo] positions at every s-th row and column, with a depth C of 16 or 32. im2col and the
// GEMM (which packs both operands for a product of 200 thousand multiply-adds) ran the shortcuts
// of the CNN+CBAM step at 19-35 GFLOP/s, and the direct convolution, which pads and copies whole
// phase planes, no faster. Here an image's xs is gathered into the L1 cache (at stride 1 it is
// x[n] itself) and read by a register tile that broadcasts each weight from memory:
//
//   forward   y[n] = W @ xs[n] (+ bias)   a tile of 8 output channels x 3 vectors of positions
//   gx        W^T @ gy[n], scattered to the positions xs came from (zero elsewhere): the same tile
//   gW        gW += gy[n] @ xs[n]^T       a tile of 4 x 4 weights, positions in lanes
//
// The forward and gx are the same product, with the weights read along their rows or along their
// columns. The weight gradient keeps each weight's sum in the 16 lanes of a vector over the
// positions of a range of images (lane l holds an image's positions l, l + 16, ...) and adds the
// lanes once, in a fixed tree: the sums run in a fixed order, so a result does not depend on the
// thread count.
//
// What it assumes: float32, a 1x1 kernel, no padding, one group, the same stride along both axes,
// a CPU with AVX-512F (direct_conv_enabled, which also turns this path off for tests).
#pragma once

#include <cstdint>

namespace qkv::cpu {

struct PointwiseConvShape {
  int64_t C, H, W, O, stride;
  int64_t Ho, Wo, L;  // the output, L = Ho * Wo

  PointwiseConvShape(int64_t C, int64_t H, int64_t W, int64_t O, int64_t stride)
      : C(C),
        H(H),
        W(W),
        O(O),
        stride(stride),
        Ho((H - 1) / stride + 1),
        Wo((W - 1) / stride + 1),
        L(Ho * Wo) {}
  // xs is x itself (stride 1), else gathered into L floats a channel
  bool gathers() const { return stride != 1; }
};

// xs [C, L] = x [C, H, W] at rows and columns 0, s, 2 s, ... (one image). `next` (or null) is
// the image gathered after this one: the rows it will read are prefetched, one row per row read.
void pointwise_conv_gather(const PointwiseConvShape& s, const float* x, float* xs,
                           const float* next);

// gx [C, H, W] = gxs [C, L] at rows and columns 0, s, 2 s, ..., zero elsewhere (one image). With
// `accumulate`, gx holds a sum and each value is added into it, sum + value, the positions between
// left as they are: at stride 2 only every other row's lines are read and written.
void pointwise_conv_scatter(const PointwiseConvShape& s, const float* gxs, float* gx,
                            bool accumulate);

// out [M, L] = a @ b (+ bias [M], or null) with b [K, L] and a's element (m, k) at a[m * a_m + k
// * a_k]: the forward with a = W (a_m = C, a_k = 1), gx's positions with a = W^T (1, C). Each
// output is its bias (or zero) and then the products added in k order by FMA.
void pointwise_conv_product(int64_t M, int64_t K, int64_t L, const float* a, int64_t a_m,
                            int64_t a_k, const float* b, const float* bias, float* out);

// lanes [O * C, 16] += the products gy[o][l] * xs[c][l] of `images` images, position l into lane
// l % 16 of weight (o, c), images in order; gy [images, O, L] and xs [images, C, L], each
// contiguous. A register tile of weights runs over all of them before its lanes go back to
// memory: at 7 x 7 an image has only four vectors of positions.
void pointwise_conv_weight_grad(const PointwiseConvShape& s, int64_t images, const float* gy,
                                const float* xs, float* lanes);

// gw [count] = the sums of lanes [count, 16], each in the same fixed tree.
void pointwise_conv_add_lanes(int64_t count, const float* lanes, float* gw);

}  // namespace qkv::cpu
