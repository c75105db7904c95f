// The direct convolution in bfloat16, on AVX512-BF16's VDPBF16PS: what autocast's convolutions of
// the float32 direct convolution's shapes run where that instruction is the CPU's bfloat16 kernel
// (conv2d_kernels.cpp; the float32 direct convolution, direct_conv.h, is the model). The forward
// (y, and gx at stride 1 by the flipped kernel) and the weight gradient; below, in that order.
//
// VDPBF16PS adds to each float32 lane the products of one pair of bfloat16 values from each
// operand. Here a lane is an output position and a pair is two input channels: the padded image is
// stored as planes of channel pairs, word q of plane p holding channels 2p and 2p + 1 at padded
// position q (rounded to bfloat16, an odd channel count padded with a zero channel), and the
// weights as the same pairs, one 32-bit word per tap and output channel. A tap (p, i, j) then reads
// sixteen consecutive positions as sixteen consecutive words, one unaligned load, and multiplies
// them by its weight pair broadcast to every lane: a VDPBF16PS does the work of two FMAs. The
// output is computed, as in float32, at every position of Ho rows of Wq columns, in tiles of up to
// 8 output channels x 3 vectors of positions, bias first and the taps' pairs added in order.
//
// At stride 2 the planes are DirectConvShape's phase planes (direct_conv.h), made in float32 by
// direct_conv_pad and then paired (or rounded): a tap reads its phase plane at consecutive words.
//
// What it assumes: stride 1 or 2, dilation 1, one group, any kernel size and padding with a
// non-empty output, and a CPU whose bfloat16 kernel is VDPBF16PS (bf16_kernel(), gemm_bf16.h: where
// it measured faster than the float32 FMA; on AMX machines the float32 direct convolution runs on
// rounded operands instead, conv2d_kernels.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/direct_conv.h"
#include "engine/dtype.h"

namespace qkv::cpu {

// bf16_kernel() is VDPBF16PS and tests have not turned the direct convolution off
// (set_direct_conv_enabled) nor this twin (below).
bool direct_conv_bf16_enabled();
// For tests: autocast's convolutions of the direct convolution's shapes on the float32 direct
// convolution of rounded operands, as where the bfloat16 kernel is AMX (conv2d_kernels.cpp), even
// where VDPBF16PS is it; true again puts the twin back.
void set_direct_conv_bf16_enabled(bool on);

// Channel pairs of an image of s.C channels: (C + 1) / 2.
inline int64_t channel_pairs(const DirectConvShape& s) { return (s.C + 1) / 2; }

// 32-bit words of a padded image in channel pairs, with the slack the last plane's reads run into.
inline int64_t bf16_pair_words(const DirectConvShape& s) {
  return channel_pairs(s) * s.stride * s.stride * s.plane + s.kw + 16;
}

// The weights [O, C, kh, kw] as pairs wp [C / 2 rounded up, kh, kw][O]: the word of (p, i, j, o)
// holds w[o][2p][i][j] in its low half and w[o][2p + 1][i][j] (zero past C) in its high half,
// both rounded to bfloat16.
std::vector<uint32_t> direct_conv_bf16_weights(const DirectConvShape& s, const float* w);

// xp = x [C, H, W] rounded to bfloat16 in padded planes of channel pairs [C / 2 rounded up,
// stride^2, plane], zero around, then zero slack: bf16_pair_words(s) words. scratch: at stride 2,
// s.padded_floats() floats (unused at stride 1).
void direct_conv_bf16_pad(const DirectConvShape& s, const float* x, uint32_t* xp, float* scratch);

// y [O, Ho, Wo] of one image from its padded pairs xp and the weight pairs wp; bias [O] (float32,
// added first) or null; yq is scratch of O * Qs floats.
void direct_conv_bf16_forward(const DirectConvShape& s, const uint32_t* xp, const uint32_t* wp,
                              const float* bias, float* yq, float* y);

// The weight gradient, gW[o][c][i][j] = sum over q of gy[o][q] * xp[c][q + i * Wq + j], pairs
// the positions instead: plain padded planes of bfloat16 values and gy's rows of Wq columns in
// bfloat16, where a 64-byte load from any tap's offset holds positions (q + 2 l, q + 2 l + 1) in
// lane l, as does the load from gy's row at q. A tile of 4 output channels x 6 taps keeps its sums
// in lanes over the positions of a few images and adds them up once, as in float32.

// Positions a row of gy holds: Q rounded up to whole vectors of 32 bfloat16 values.
inline int64_t bf16_gy_row(const DirectConvShape& s) { return (s.Q + 31) / 32 * 32; }

// bfloat16 values of one image's padded planes, with the slack the last plane's reads run into.
inline int64_t bf16_padded_values(const DirectConvShape& s) {
  return s.C * s.stride * s.stride * s.plane + s.kw + 32;
}

// xp = x [C, H, W] rounded to bfloat16 in padded planes [C, stride^2, plane], zero around, then
// zero slack: bf16_padded_values(s) values. scratch as direct_conv_bf16_pad's.
void direct_conv_bf16_pad_planes(const DirectConvShape& s, const float* x, bf16_t* xp,
                                 float* scratch);

// gy [O, Ho, Wo] of one image rounded to bfloat16 as rows [O, bf16_gy_row(s)] of Wq columns, zero
// past Wo and past Q.
void direct_conv_bf16_gy_rows(const DirectConvShape& s, const float* gy, bf16_t* gyq);

// gw [O, K] += the weight gradient of `images` images: xp[n] at xp + n * bf16_padded_values(s),
// gyq[n] at gyq + n * O * bf16_gy_row(s).
void direct_conv_bf16_weight_grad(const DirectConvShape& s, int64_t images, const bf16_t* xp,
                                  const bf16_t* gyq, float* gw);

// With the output channels across lanes, as float32 has them for 3-wide kernels and a multiple of
// 16 output channels (s.weight_grad_in_channel_lanes()): a lane is an output channel and its pair
// two positions (ow, ow + 1) of an output row, so gy is transposed into words [Ho, Wo / 2 rounded
// up, O] (a row of odd width pairs its last position with zero), and a tap's pair of input values,
// two consecutive bfloat16 of a padded plane, is one 32-bit broadcast.

// Words of one image's paired gy.
inline int64_t bf16_gy_pair_words(const DirectConvShape& s) {
  return s.Ho * ((s.Wo + 1) / 2) * s.O;
}

// gy [O, Ho, Wo] of one image rounded and transposed into pairs gyp (bf16_gy_pair_words(s) words);
// scratch: Ho * Wo * O floats.
void direct_conv_bf16_gy_pairs(const DirectConvShape& s, const float* gy, uint32_t* gyp,
                               float* scratch);

// gwt [K, O] += the weight gradient of `images` images in channel lanes: xp[n] at xp + n *
// bf16_padded_values(s), gyp[n] at gyp + n * bf16_gy_pair_words(s).
void direct_conv_bf16_weight_grad_in_channel_lanes(const DirectConvShape& s, int64_t images,
                                                   const bf16_t* xp, const uint32_t* gyp,
                                                   float* gwt);

// The input's gradient at stride 2 has no bfloat16 twin: DirectConvInputGrad (direct_conv.h) runs
// on operands rounded to bfloat16 and kept in float32, whose products a float32 FMA makes exactly,
// so it sums the same products as VDPBF16PS would (in another order).

// out[0, n) = x[0, n) rounded to bfloat16 (to nearest even, float32 subnormals read as zero, as
// the GEMM's packing rounds), as float32 values. out may be x.
void round_to_bf16_values(const float* x, int64_t n, float* out);

}  // namespace qkv::cpu
