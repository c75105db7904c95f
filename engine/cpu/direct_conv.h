// A direct float32 convolution for stride 1, on AVX-512 registers: the CPU conv2d's path
// (conv2d_kernels.cpp) for its 3x3 layers with few channels, which im2col turns into poor GEMMs.
//
// Why it exists: with 16 output channels, y[n] = W @ cols is a GEMM with 16 rows (a 12-row
// register tile and a 4-row one) over columns that im2col first copies kh * kw times. Here the
// image is copied once, with its padding, into planes of Wp = W + 2 pw columns; an output
// position q = oh * Wp + ow then reads tap (i, j) of channel c at xp[c][q + i * Wp + j], so
// sixteen consecutive positions are sixteen consecutive floats of one padded plane: one unaligned
// load, whatever the tap. The output is computed at every q of Ho rows of Wp columns (the last
// Wp - Wo of each row are discarded), a tile of up to 8 output channels x 3 vectors of positions
// at a time, each tap's weight broadcast to all lanes.
//
// The weight gradient is the same walk turned around: gW[o][c][i][j] = sum over q of gy[o][q] *
// xp[c][q + i * Wp + j], with gy laid out on the same Wp-column rows and zero in the discarded
// columns; a tile of 4 output channels x 6 taps keeps its sums in vector lanes over the positions
// of a few images and adds them up once. The input's gradient at stride 1 is the forward
// convolution of gy by the flipped kernel (conv2d_kernels.cpp), so it takes the forward here
// (or, for 3x3 windows with padding 1 and enough channels, Winograd's: winograd_conv.h).
//
// What it assumes: float32, stride 1 or 2 (the same along both axes), dilation 1, one group, a CPU
// with AVX-512F (direct_conv_enabled); any kernel size and padding with a non-empty output. Sums
// run in a fixed order (taps in order for an output; positions in lanes, images in order, lanes in
// a fixed tree for a weight), so a result does not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/prefetch.h"

namespace qkv::cpu {

// The weight gradient's kernel: output channels across lanes (3-wide kernels, a multiple of 16
// output channels; the gradient laid out [K, O]), else positions across lanes ([O, K]).
inline bool direct_conv_channel_lanes(int64_t kw, int64_t O) { return kw == 3 && O % 16 == 0; }

// The sizes of one image's convolution and of its padded planes. At stride 2 each channel's
// padded image is split into four phase planes, (a, b) holding the padded rows a, a + 2, ... and
// columns b, b + 2, ...: output (oh, ow) reads tap (i, j) at row oh + i / 2, column ow + j / 2 of
// phase (i % 2, j % 2), so a stride-2 window also reads consecutive positions from consecutive
// floats.
struct DirectConvShape {
  int64_t C, H, W, O, kh, kw, ph, pw, stride;
  int64_t Hp, Wp;  // the padded image
  int64_t Ho, Wo;  // the output
  int64_t Hq, Wq;  // a phase plane (the padded image at stride 1)
  int64_t plane;   // Hq * Wq
  int64_t Q;       // output positions computed: Ho rows of Wq
  int64_t Qs;      // Q rounded up to whole vectors of 16: a row of the padded output and of gy
  int64_t K;       // C * kh * kw
  std::vector<int64_t> tap_offsets;  // K: where tap k = (c * kh + i) * kw + j reads, from q
  std::vector<int64_t> positions;    // Ho * Wo: the q of output (oh, ow), oh * Wq + ow

  DirectConvShape(int64_t C, int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw, int64_t ph,
                  int64_t pw, int64_t stride);
  // floats of a padded image, with the slack the last plane's reads run into
  int64_t padded_floats() const { return C * stride * stride * plane + kw + 16; }
  bool weight_grad_in_channel_lanes() const { return direct_conv_channel_lanes(kw, O); }
  // The forward with the output channels across lanes (a multiple of 32 of them), at the L = Ho *
  // Wo positions alone, where the rows of Wq positions rounded up to Qs would compute more than a
  // tenth that is thrown away (7 x 7 outputs: 64 computed for 49; 14 x 14 at stride 1: 224 for
  // 196). direct_conv_forward_lanes_enabled() can turn it off, for tests.
  bool forward_in_channel_lanes() const;
};

// AVX-512F is here and tests have not turned the path off.
bool direct_conv_enabled();
// For tests: send every convolution down the im2col path, to compare the two.
void set_direct_conv_enabled(bool on);

// For tests: the forward of every shape on its rows of Wq positions, to compare the two.
void set_direct_conv_forward_lanes_enabled(bool on);

// xp = x [C, H, W] in padded planes [C, stride^2, Hq, Wq], zero around, then zero slack.
void direct_conv_pad(const DirectConvShape& s, const float* x, float* xp);

// y [O, Ho, Wo] of one image from its padded planes xp and the weights transposed to wt [K, O]
// (k = (c * kh + i) * kw + j); bias [O] or null. yq is scratch of O * Qs floats. Each output
// is bias + the taps' products added in tap order by FMA, in either layout: the same bits.
// `ahead` (the next image's input and output) is asked for as the tiles go.
void direct_conv_forward(const DirectConvShape& s, const float* xp, const float* wt,
                         const float* bias, float* yq, float* y, PrefetchAhead ahead = {});

// The input's gradient at stride 2, image by image. Phase (a, b) of the padded input's gradient
// (rows a, a + 2, ..., columns b, b + 2, ...) is a stride-1 convolution of gy alone: tap (a + 2 m,
// b + 2 n) of the kernel reaches it from output (r - m, t - n), so
//
//   gxp_ab[c][r][t] = sum over o, m, n of gy[o][r - m][t - n] * w[o][c][a + 2 m][b + 2 n],
//
// a convolution by the sub-kernel of taps with i % 2 == a, j % 2 == b, flipped, over gy padded by
// one less than the largest sub-kernel (ceil(k / 2)) on every side. The four phases share that
// padded gy, each reading it through its own tap offsets, and are interleaved into gx. Each phase
// computes only the rows (and, with the channels across lanes, the positions) that land inside
// gx: the padding's rows and columns are never computed (a [128, 32, 14, 14] -> 64 layer's
// phases would compute 64 positions for the 49 they give).
class DirectConvInputGrad {
 public:
  // For a convolution `s` (stride 2) and its weights [O, C, kh, kw].
  DirectConvInputGrad(const DirectConvShape& s, const float* w);
  // Scratch floats one image needs.
  int64_t scratch_floats() const;
  // gx [C, H, W] of one image from its gy [O, Ho, Wo].
  void run(const float* gy, float* gx, float* scratch) const;

 private:
  // One phase's convolution of the padded gy: its shape reads from row first_row on, and gives
  // rows [first_row, first_row + rows) of the phase, at columns [first_col, first_col + cols)
  // with the channels across lanes (else at every column of those rows).
  struct Phase {
    DirectConvShape shape;
    std::vector<float> weights;  // [O * Ma * Nb, C]
    int64_t first_row, rows, first_col, cols;
  };
  DirectConvShape s_;
  DirectConvShape gy_shape_;   // gy padded: C = O channels of Ho x Wo, the largest sub-kernel
  bool lanes_;                 // the phases' outputs with the channels across lanes
  std::vector<Phase> phases_;  // (a, b) = (0, 0), (0, 1), (1, 0), (1, 1)
};

// gy [O, Ho, Wo] of one image as gyq [O, Qs]: rows of Wp columns, zero past Wo and past Q.
void direct_conv_gy_rows(const DirectConvShape& s, const float* gy, float* gyq);

// gy [O, Ho, Wo] of one image transposed to gyt [Ho * Wo, O].
void direct_conv_gy_transposed(const DirectConvShape& s, const float* gy, float* gyt);

// gwt [K, O] += the weight gradient of `images` images with the output channels across lanes
// (weight_grad_in_channel_lanes): xp[n] at xp + n * padded_floats(), gyt[n] at gyt + n * Ho * Wo
// * O. `ahead` (the next pass's inputs and gy) is asked for as the tiles go.
void direct_conv_weight_grad_in_channel_lanes(const DirectConvShape& s, int64_t images,
                                              const float* xp, const float* gyt, float* gwt,
                                              PrefetchAhead ahead = {});

// gw [O, K] += the weight gradient of `images` images: xp[n] at xp + n * padded_floats(), gyq[n]
// at gyq + n * O * Qs. The images' sums are added in lanes first, then into gw.
void direct_conv_weight_grad(const DirectConvShape& s, int64_t images, const float* xp,
                             const float* gyq, float* gw);

}  // namespace qkv::cpu
