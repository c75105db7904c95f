// conv2d on the CPU, image by image, on columns that stay in the L2 cache.
//
// The composed convolution (Backend's default) writes cols for the whole batch, kh * kw times the
// input ([128, 144, 784] floats, 58 MB, for a [128, 16, 28, 28] input and a 3x3 kernel), and its
// GEMMs read it back from memory; its weight gradient is a product per image and a sum over an
// [N, O, K] temporary. With at most a few dozen output channels the products are too shallow to
// hide that traffic. Here each image's cols (a few hundred KB) is written, multiplied and, in the
// backward, turned back into the input's gradient while it is in L2:
//
//   forward    cols = im2col(x[n]),   y[n] = W @ cols (+ bias)          for each group
//   backward   cols = im2col(x[n]),   gW += gy[n] @ cols^T              one accumulation, depth N*L
//              gcols = W^T @ gy[n],   gx[n] = col2im(gcols)
//
// (the first two products transposed when a group has many output channels, and at stride 1 gx
// as the forward convolution of gy by the flipped kernel: see ConvShape's forward_transposed,
// gw_transposed and gx_by_flipped_kernel).
//
// A 1x1 kernel with stride 1 and no padding has cols == x[n], used in place. The batch is split
// into a fixed number of contiguous ranges of images (kImageRanges, fewer for a small batch),
// whatever the thread count; threads take whole ranges, each with its own scratch and its own
// partial gW and gbias, and the partial sums are added in range order: a result does not depend
// on the thread count (docs/TESTING.md, "Determinism"). A single image leaves the threading to
// the GEMM.
//
// Under autocast, where the CPU has a bfloat16 kernel (gemm_bf16.h), the products are bfloat16:
// the direct convolution's bfloat16 twin where that kernel is VDPBF16PS (direct_conv_bf16.h), the
// pointwise kernel and gx at stride 2 on operands rounded to bfloat16 (their float32 FMA makes
// those products exactly), and every other product the bfloat16 GEMM on float32 operands rounded
// as it packs them.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "engine/autocast.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/direct_conv.h"
#include "engine/cpu/direct_conv_bf16.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_bf16.h"
#include "engine/cpu/gemm_pack.h"
#include "engine/cpu/im2col.h"
#include "engine/cpu/pointwise_conv.h"
#include "engine/cpu/prefetch.h"
#include "engine/cpu/scratch_buffer.h"
#include "engine/cpu/winograd_conv.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {

// The sizes of one convolution, per image and per group.
struct ConvShape {
  int64_t N, C, H, W, O, groups, L, K;  // L = Ho * Wo, K = C / groups * kh * kw
  Window2d window;
  bool float32;
  bool bf16_products;  // float32 under autocast: the products multiply operands rounded to bfloat16

  ConvShape(int64_t n, int64_t c, int64_t h, int64_t w_, int64_t o, const Window2d& w, int64_t g,
            bool f32, bool bf16)
      : N(n),
        C(c),
        H(h),
        W(w_),
        O(o),
        groups(g),
        L(w.out_h(h) * w.out_w(w_)),
        K(c / g * w.kernel_h * w.kernel_w),
        window(w),
        float32(f32),
        bf16_products(bf16) {}
  ConvShape(const Tensor& x, const Tensor& weight, const Window2d& w, int64_t g)
      : ConvShape(x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), w, g,
                  x.dtype() == DType::f32,
                  x.dtype() == DType::f32 && autocast_dtype() == DType::bf16) {}
  int64_t Og() const { return O / groups; }
  // The direct convolution (direct_conv.h) takes float32 at stride 1 or 2 with one group, but
  // not the pointwise convolution's 1x1 windows, nor a padded 1x1 window at stride 2, which reads
  // a quarter of the input that the phase planes would copy whole (im2col and the GEMM then).
  // Under autocast too, where its bfloat16 twin does not take the shape (an AMX machine), on
  // operands rounded to bfloat16 and kept in float32, whose products the float32 FMA makes
  // exactly: for the CNN's few channels it is faster than im2col around the AMX tiles' GEMM
  // (docs/CPU_KERNELS.md, "The convolutions in bfloat16 on an AMX machine").
  bool direct() const {
    const int64_t stride = window.stride_h;
    return float32 && !direct_bf16() && groups == 1 && window.stride_w == stride && !pointwise() &&
           (stride == 1 || (stride == 2 && window.kernel_h * window.kernel_w > 1)) &&
           window.dilation_h == 1 && window.dilation_w == 1 && L > 0 && direct_conv_enabled();
  }
  // The forward (and so gx at stride 1) of a 3x3 window at stride 1 with padding 1 in float32
  // takes Winograd's F(2x2, 3x3) (winograd_conv.h) where it is faster than the direct
  // convolution: not under autocast, whose products must stay those of the rounded operands.
  bool winograd() const {
    return direct() && !bf16_products && window.kernel_h == 3 && window.kernel_w == 3 &&
           window.stride_h == 1 && window.pad_h == 1 && window.pad_w == 1 &&
           winograd_conv_takes(C, H, W, O);
  }
  // Under autocast, where VDPBF16PS is the bfloat16 kernel, the float32 direct convolution's
  // shapes take its bfloat16 twin (direct_conv_bf16.h): the forward, for y and for gx by the
  // flipped kernel, and gW.
  bool direct_bf16() const {
    const int64_t stride = window.stride_h;
    return bf16_products && groups == 1 && window.stride_w == stride && !pointwise() &&
           (stride == 1 || (stride == 2 && window.kernel_h * window.kernel_w > 1)) &&
           window.dilation_h == 1 && window.dilation_w == 1 && L > 0 && direct_conv_bf16_enabled();
  }
  // A 1x1 window without padding in float32 with one group takes the pointwise convolution
  // (pointwise_conv.h) at any stride: the shortcuts' [128, 16, 28, 28] -> 32 at stride 2. Under
  // autocast too, on operands rounded to bfloat16 and kept in float32 (as direct() above).
  bool pointwise() const {
    return float32 && groups == 1 && window.kernel_h == 1 && window.kernel_w == 1 &&
           window.pad_h == 0 && window.pad_w == 0 && window.stride_w == window.stride_h && L > 0 &&
           direct_conv_enabled();
  }
  PointwiseConvShape pointwise_shape() const {
    return PointwiseConvShape(C, H, W, O, window.stride_h);
  }
  DirectConvShape direct_shape() const {
    return DirectConvShape(C, H, W, O, window.kernel_h, window.kernel_w, window.pad_h, window.pad_w,
                           window.stride_h);
  }
  // With 32 or more output channels a group (one full register tile of floats across), the
  // weight gradient's products put the channels along the GEMM's columns, gW^T += cols @ gy[n]^T
  // ([K, O/g], transposed into gW at the end): cols is read in place as the left operand and only
  // gy^T is packed, instead of cols^T. With 16, half of each tile's vector lanes would idle, and
  // gy @ cols^T is as fast.
  bool gw_transposed() const {
    if (pointwise()) return false;
    if (direct_bf16()) return direct_conv_channel_lanes(window.kernel_w, O);
    return direct() ? direct_conv_channel_lanes(window.kernel_w, O) : Og() >= 32;
  }
  // The forward likewise, y[n]^T = cols^T @ W^T ([L, O/g], transposed into y while it is in
  // L1/L2), where an image has few output positions: W @ cols then has a handful of 32-wide
  // column tiles, the last one ragged (7 x 7: one full and one of 17), while cols^T @ W^T has
  // full ones. With many positions W @ cols is faster (no transpose, deep rows).
  bool forward_transposed() const {
    return Og() >= 32 && L <= 256 && !direct() && !pointwise() && !direct_bf16();
  }
  // At stride 1, gx is itself a convolution: of gy (O channels, Ho x Wo) by the weights with
  // their kernel flipped and in and out channels swapped, padded by k - 1 - p, which gives an
  // H x W output. It replaces the shallow gcols = W^T @ gy (depth O/g, a result kh * kw times
  // the input) and col2im by a deep product on gy's columns, like the forward's. Taken where
  // that padding is not negative and gy's columns are no larger than gcols (O <= C: the stem's
  // 1 -> 16 would write sixteen times more); a 1x1 kernel keeps gcols, which is gx already.
  bool gx_by_flipped_kernel() const {
    return window.stride_h == 1 && window.stride_w == 1 && window.dilation_h == 1 &&
           window.dilation_w == 1 && window.pad_h <= window.kernel_h - 1 &&
           window.pad_w <= window.kernel_w - 1 && O <= C && !cols_is_x();
  }
  ConvShape flipped() const {
    Window2d f = window;
    f.pad_h = window.kernel_h - 1 - window.pad_h;
    f.pad_w = window.kernel_w - 1 - window.pad_w;
    return ConvShape(N, O, window.out_h(H), window.out_w(W), C, f, groups, float32, bf16_products);
  }
  int64_t image() const { return C * H * W; }
  int64_t cols() const { return groups * K * L; }  // one image's columns
  // cols is the input itself: a 1x1 kernel, stride 1, no padding
  bool cols_is_x() const {
    return window.kernel_h == 1 && window.kernel_w == 1 && window.stride_h == 1 &&
           window.stride_w == 1 && window.pad_h == 0 && window.pad_w == 0;
  }
};

// The batch's ranges of images: enough for the threads of a small machine to share evenly, few
// enough that the per-range partial sums of gW stay small. A constant, not the thread count, so
// the sums are the same at any thread count.
constexpr int64_t kImageRanges = 16;
int64_t image_ranges(int64_t N) { return std::max<int64_t>(1, std::min<int64_t>(kImageRanges, N)); }

// Runs images(range, n0, n1) for each of the `ranges` ranges that split [0, N), threads taking
// whole ranges; one range (a single image) runs on the calling thread, where its GEMMs may thread
// themselves.
template <typename Fn>
void for_each_image_range(int64_t N, int64_t ranges, Fn&& images) {
  if (ranges == 1) return images(0, 0, N);
  parallel_for(0, ranges, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) images(r, r * N / ranges, (r + 1) * N / ranges);
  });
}

// c = op(a) @ op(b), or c += it: gemm.h's float32 or float64 product, or under autocast the
// bfloat16 one, the float32 operands rounded as they are packed (gemm_bf16.h).
template <typename T>
void product(const ConvShape& s, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
             const T* a, int64_t lda, const T* b, int64_t ldb, bool accumulate, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (s.bf16_products)
      return gemm_bf16_batched(1, trans_a, trans_b, m, n, k, a, lda, 0, b, ldb, 0, accumulate, c,
                               ldc, 0);
  gemm<T>(trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, T(accumulate ? 1 : 0), c, ldc);
}

// One image's columns: x itself, or written into `scratch`.
template <typename T>
const T* columns_of(const ConvShape& s, const T* xn, ScratchBuffer& scratch) {
  if (s.cols_is_x()) return xn;
  T* cols = static_cast<T*>(scratch.get(sizeof(T) * size_t(s.cols())));
  im2col_planes(xn, s.C, s.H, s.W, s.window, cols, T(0));
  return cols;
}

// dst [cols, rows] = src [rows, cols] transposed: in 16 x 16 squares in registers where the CPU
// has AVX-512 and T is float (one value at a time, each store lands a line from the one before).
template <typename T>
void transpose_block(const T* src, int64_t rows, int64_t cols, T* dst) {
  static const bool squares = __builtin_cpu_supports("avx512f");
  if constexpr (std::is_same_v<T, float>)
    if (squares && rows <= INT32_MAX)
      return pack_transposed_avx512(src, cols, rows, cols, int(rows), dst);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// The weights [O, C/g, kh, kw] as forward_images reads them: wt [groups, K, O/g] when
// forward_transposed() or direct(), else nothing; when winograd(), followed by the transformed
// weights U [16, C, O] (winograd_weights), made once a call rather than once an image range.
template <typename T>
std::vector<T> transposed_weights(const ConvShape& s, const T* w) {
  std::vector<T> wt;
  if (!s.forward_transposed() && !s.direct()) return wt;
  const int64_t Og = s.Og(), K = s.K;
  wt.resize(size_t(s.O * K));
  for (int64_t g = 0; g < s.groups; ++g)
    transpose_block(w + g * Og * K, Og, K, wt.data() + g * K * Og);
  if constexpr (std::is_same_v<T, float>)
    if (s.winograd()) {
      const WinogradShape shape(s.C, s.H, s.W, s.O, 1);
      wt.resize(size_t(s.O * K + shape.weight_floats()));
      winograd_weights(shape, wt.data(), wt.data() + s.O * K);
    }
  return wt;
}

// The weights of s.flipped(): [C, O/g, kh, kw], wf[g C/g + c][o][i][j] = w[g O/g + o][c][kh-1-i]
// [kw-1-j].
template <typename T>
std::vector<T> flipped_weights(const ConvShape& s, const T* w) {
  const int64_t Og = s.Og(), Cg = s.C / s.groups, kh = s.window.kernel_h, kw = s.window.kernel_w;
  std::vector<T> wf(size_t(s.O * Cg * kh * kw));
  for (int64_t g = 0; g < s.groups; ++g)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j)
            wf[size_t((((g * Cg + c) * Og + o) * kh + i) * kw + j)] =
                w[(((g * Og + o) * Cg + c) * kh + (kh - 1 - i)) * kw + (kw - 1 - j)];
  return wf;
}

// Under autocast, the weights rounded to bfloat16 (as float32 values) for the kernels that multiply
// in float32 (the pointwise and direct convolutions, gx at stride 2); nothing otherwise. The
// bfloat16 kernels round them again, to the same values.
template <typename T>
std::vector<T> bf16_rounded_weights(const ConvShape& s, const T* w) {
  std::vector<T> rounded;
  if constexpr (std::is_same_v<T, float>)
    if (s.bf16_products && (s.pointwise() || s.direct() || s.direct_bf16())) {
      rounded.resize(size_t(s.O * s.K));
      round_to_bf16_values(w, s.O * s.K, rounded.data());
    }
  return rounded;
}

// The weights [O, C, kh, kw] as the bfloat16 direct forward reads them when direct_bf16(), else
// nothing.
template <typename T>
std::vector<uint32_t> pair_weights(const ConvShape& s, const T* w) {
  if constexpr (std::is_same_v<T, float>)
    if (s.direct_bf16()) return direct_conv_bf16_weights(s.direct_shape(), w);
  return {};
}

// y for images [n0, n1). wt is the weights as [groups, K, O/g] when forward_transposed() or
// direct(), pairs their pair_weights.
template <typename T>
void forward_images(const ConvShape& s, const T* x, const T* w, const T* wt, const uint32_t* pairs,
                    const T* bias, T* y, int64_t n0, int64_t n1) {
  thread_local ScratchBuffer cols_scratch, yt_scratch, phases_scratch;
  const int64_t Og = s.Og(), K = s.K, L = s.L;
  if constexpr (std::is_same_v<T, float>)
    if (s.direct_bf16()) {
      const DirectConvShape d = s.direct_shape();
      uint32_t* xp =
          static_cast<uint32_t*>(cols_scratch.get(sizeof(uint32_t) * size_t(bf16_pair_words(d))));
      float* yq = static_cast<float*>(yt_scratch.get(sizeof(float) * size_t(d.O * d.Qs)));
      float* phases =
          d.stride == 1
              ? nullptr
              : static_cast<float*>(phases_scratch.get(sizeof(float) * size_t(d.padded_floats())));
      for (int64_t n = n0; n < n1; ++n) {
        direct_conv_bf16_pad(d, x + n * s.image(), xp, phases);
        direct_conv_bf16_forward(d, xp, pairs, bias, yq, y + n * s.O * L);
      }
      return;
    }
  if constexpr (std::is_same_v<T, float>)
    if (s.pointwise()) {
      const PointwiseConvShape p = s.pointwise_shape();
      float* xs = static_cast<float*>(cols_scratch.get(sizeof(float) * size_t(p.C * p.L)));
      for (int64_t n = n0; n < n1; ++n) {
        const float* xn = x + n * s.image();
        if (p.gathers()) pointwise_conv_gather(p, xn, xs, n + 1 < n1 ? xn + s.image() : nullptr);
        if (s.bf16_products) round_to_bf16_values(p.gathers() ? xs : xn, p.C * p.L, xs);
        pointwise_conv_product(p.O, p.C, p.L, w, p.C, 1, p.gathers() || s.bf16_products ? xs : xn,
                               bias, y + n * p.O * p.L);
      }
      return;
    }
  if constexpr (std::is_same_v<T, float>)
    if (s.winograd()) {
      const int64_t group = WinogradShape::group(s.C, s.H, s.W, s.O), bytes = sizeof(float);
      float* scratch = static_cast<float*>(cols_scratch.get(
          sizeof(float) * size_t(WinogradShape(s.C, s.H, s.W, s.O, group).scratch_floats())));
      for (int64_t n = n0; n < n1; n += group) {
        const int64_t images = std::min(group, n1 - n), next = n + images;
        const int64_t next_images = std::min(group, n1 - next);
        const PrefetchAhead ahead =
            next_images > 0
                ? PrefetchAhead({x + next * s.image(), bytes * next_images * s.image()},
                                {y + next * s.O * L, bytes * next_images * s.O * L, true})
                : PrefetchAhead();
        winograd_conv_forward(WinogradShape(s.C, s.H, s.W, s.O, images), x + n * s.image(),
                              wt + s.O * K, bias, y + n * s.O * L, scratch, ahead);
      }
      return;
    }
  if constexpr (std::is_same_v<T, float>)
    if (s.direct()) {
      const DirectConvShape d = s.direct_shape();
      float* xp = static_cast<float*>(cols_scratch.get(sizeof(float) * size_t(d.padded_floats())));
      float* yq = static_cast<float*>(yt_scratch.get(sizeof(float) * size_t(d.O * d.Qs)));
      const int64_t bytes = sizeof(float);
      for (int64_t n = n0; n < n1; ++n) {
        direct_conv_pad(d, x + n * s.image(), xp);
        if (s.bf16_products) round_to_bf16_values(xp, d.padded_floats(), xp);  // under autocast
        const PrefetchAhead next =
            n + 1 < n1 ? PrefetchAhead({x + (n + 1) * s.image(), bytes * s.image()},
                                       {y + (n + 1) * s.O * L, bytes * s.O * L, true})
                       : PrefetchAhead();
        direct_conv_forward(d, xp, wt, bias, yq, y + n * s.O * L, next);
      }
      return;
    }
  for (int64_t n = n0; n < n1; ++n) {
    const T* cols = columns_of(s, x + n * s.image(), cols_scratch);
    T* yn = y + n * s.O * L;
    if (s.forward_transposed()) {
      T* yt = static_cast<T*>(yt_scratch.get(sizeof(T) * size_t(L * Og)));
      for (int64_t g = 0; g < s.groups; ++g) {
        product(s, true, false, L, Og, K, cols + g * K * L, L, wt + g * K * Og, Og, false, yt, Og);
        for (int64_t o = 0; o < Og; ++o) {
          const T b = bias ? bias[g * Og + o] : T(0);
          T* row = yn + (g * Og + o) * L;
          for (int64_t l = 0; l < L; ++l) row[l] = yt[l * Og + o] + b;
        }
      }
      continue;
    }
    if (bias)
      for (int64_t o = 0; o < s.O; ++o) std::fill(yn + o * L, yn + (o + 1) * L, bias[o]);
    for (int64_t g = 0; g < s.groups; ++g)
      product(s, false, false, Og, L, K, w + g * Og * K, K, cols + g * K * L, L, bias != nullptr,
              yn + g * Og * L, L);
  }
}

// gw [O, K] (or [K, O] when gw_transposed()) += the weight gradient of images [n0, n1) by the
// direct convolution, a pass of a few images at a time: as many as keep their padded planes and gy
// rows within kPassBytes (at least one). Where gx is wanted, `gx_images(first, end)` computes it
// for each pass's images right after the pass's tiles, from the gy the pass has just brought into
// the L2. The tiles ask for the next pass's inputs and gy (prefetch.h), the last pass's for the
// first pass of images [n1, n_after), which the thread runs next.
template <typename GxImages>
void direct_backward(const ConvShape& s, const float* x, const float* gy, float* gw, float* gx,
                     int64_t n0, int64_t n1, int64_t n_after, GxImages gx_images) {
  constexpr int64_t kPassBytes = 512 << 10;  // half of a 1 MB L2
  thread_local ScratchBuffer xp_scratch, gyq_scratch;
  if (n0 == n1) return;
  const DirectConvShape d = s.direct_shape();
  const bool lanes = d.weight_grad_in_channel_lanes();
  const int64_t image_floats = d.padded_floats(), gy_floats = lanes ? d.O * s.L : d.O * d.Qs;
  const int64_t per_pass = std::clamp<int64_t>(
      kPassBytes / (int64_t(sizeof(float)) * (image_floats + gy_floats)), 1, n1 - n0);
  float* xp = static_cast<float*>(xp_scratch.get(sizeof(float) * size_t(per_pass * image_floats)));
  float* gyq = static_cast<float*>(gyq_scratch.get(sizeof(float) * size_t(per_pass * gy_floats)));
  const int64_t bytes = sizeof(float);
  for (int64_t first = n0; first < n1; first += per_pass) {
    const int64_t images = std::min(per_pass, n1 - first);
    for (int64_t i = 0; i < images; ++i) {
      direct_conv_pad(d, x + (first + i) * s.image(), xp + i * image_floats);
      if (lanes)
        direct_conv_gy_transposed(d, gy + (first + i) * s.O * s.L, gyq + i * gy_floats);
      else
        direct_conv_gy_rows(d, gy + (first + i) * s.O * s.L, gyq + i * gy_floats);
    }
    if (s.bf16_products) {  // under autocast: x and gy rounded
      round_to_bf16_values(xp, images * image_floats, xp);
      round_to_bf16_values(gyq, images * gy_floats, gyq);
    }
    const int64_t next = first + images;
    const int64_t next_images = std::min(per_pass, (next < n1 ? n1 : n_after) - next);
    const PrefetchAhead next_pass =
        next_images > 0 ? PrefetchAhead({x + next * s.image(), bytes * next_images * s.image()},
                                        {gy + next * s.O * s.L, bytes * next_images * s.O * s.L})
                        : PrefetchAhead();
    if (lanes)
      direct_conv_weight_grad_in_channel_lanes(d, images, xp, gyq, gw, next_pass);
    else
      direct_conv_weight_grad(d, images, xp, gyq, gw);
    if (gx) gx_images(first, next);
  }
}

// The same in bfloat16 (direct_bf16()): gw [O, K] += the weight gradient of images [n0, n1).
void direct_bf16_weight_grad(const ConvShape& s, const float* x, const float* gy, float* gw,
                             int64_t n0, int64_t n1) {
  constexpr int64_t kPassBytes = 512 << 10;  // half of a 1 MB L2
  thread_local ScratchBuffer xp_scratch, gy_scratch, phases_scratch, transposed_scratch;
  if (n0 == n1) return;
  const DirectConvShape d = s.direct_shape();
  // gy in rows of bfloat16 values, or in pairs of positions across the channel lanes ([K, O])
  const bool lanes = d.weight_grad_in_channel_lanes();
  const int64_t image_values = bf16_padded_values(d),
                gy_values = lanes ? 2 * bf16_gy_pair_words(d) : d.O * bf16_gy_row(d);
  float* phases =
      d.stride == 1
          ? nullptr
          : static_cast<float*>(phases_scratch.get(sizeof(float) * size_t(d.padded_floats())));
  float* transposed =
      lanes ? static_cast<float*>(transposed_scratch.get(sizeof(float) * size_t(d.O * s.L)))
            : nullptr;
  const int64_t per_pass = std::clamp<int64_t>(
      kPassBytes / (int64_t(sizeof(bf16_t)) * (image_values + gy_values)), 1, n1 - n0);
  bf16_t* xp =
      static_cast<bf16_t*>(xp_scratch.get(sizeof(bf16_t) * size_t(per_pass * image_values)));
  bf16_t* gyq = static_cast<bf16_t*>(gy_scratch.get(sizeof(bf16_t) * size_t(per_pass * gy_values)));
  for (int64_t first = n0; first < n1; first += per_pass) {
    const int64_t images = std::min(per_pass, n1 - first);
    for (int64_t i = 0; i < images; ++i) {
      const float* gyn = gy + (first + i) * s.O * s.L;
      direct_conv_bf16_pad_planes(d, x + (first + i) * s.image(), xp + i * image_values, phases);
      if (lanes)
        direct_conv_bf16_gy_pairs(d, gyn, reinterpret_cast<uint32_t*>(gyq + i * gy_values),
                                  transposed);
      else
        direct_conv_bf16_gy_rows(d, gyn, gyq + i * gy_values);
    }
    if (lanes)
      direct_conv_bf16_weight_grad_in_channel_lanes(d, images, xp,
                                                    reinterpret_cast<const uint32_t*>(gyq), gw);
    else
      direct_conv_bf16_weight_grad(d, images, xp, gyq, gw);
  }
}

// gx for images [n0, n1) (when wanted: overwritten, or with accumulate_gx added into, at stride 2
// and above) and gw [O, C] (when wanted: overwritten) by the pointwise convolution, a few images at
// a time: as many as keep their xs and gy within kPassBytes (at least one), the weight gradient's
// tiles running over all of them, then gx image by image.
void pointwise_backward(const ConvShape& s, const float* x, const float* w, const float* gy,
                        float* gx, float* gw, int64_t n0, int64_t n1, bool accumulate_gx) {
  constexpr int64_t kPassBytes = 512 << 10;  // half of a 1 MB L2
  thread_local ScratchBuffer xs_scratch, gxs_scratch, lanes_scratch, rounded_gy_scratch;
  if (n0 == n1) {
    if (gw) std::fill(gw, gw + s.O * s.C, 0.0f);
    return;
  }
  const PointwiseConvShape p = s.pointwise_shape();
  const int64_t weights = p.O * p.C, lane_floats = weights * 16, gy_floats = p.O * p.L;
  const int64_t per_pass =
      std::clamp<int64_t>(kPassBytes / (int64_t(sizeof(float)) * (p.C + p.O) * p.L), 1, n1 - n0);
  float* lanes = nullptr;
  if (gw) {
    lanes = static_cast<float*>(lanes_scratch.get(sizeof(float) * size_t(lane_floats)));
    std::fill(lanes, lanes + lane_floats, 0.0f);
  }
  float* xs = static_cast<float*>(xs_scratch.get(sizeof(float) * size_t(per_pass * p.C * p.L)));
  float* gxs = static_cast<float*>(gxs_scratch.get(sizeof(float) * size_t(p.C * p.L)));
  for (int64_t first = n0; first < n1; first += per_pass) {
    const int64_t images = std::min(per_pass, n1 - first);
    const float* gy_pass = gy + first * gy_floats;
    if (s.bf16_products) {  // under autocast: gy rounded
      float* rounded =
          static_cast<float*>(rounded_gy_scratch.get(sizeof(float) * size_t(per_pass * gy_floats)));
      round_to_bf16_values(gy_pass, images * gy_floats, rounded);
      gy_pass = rounded;
    }
    if (gw) {
      const float* xs_pass = x + first * s.image();  // x itself at stride 1
      if (p.gathers()) {
        for (int64_t i = 0; i < images; ++i)
          pointwise_conv_gather(p, x + (first + i) * s.image(), xs + i * p.C * p.L,
                                first + i + 1 < n1 ? x + (first + i + 1) * s.image() : nullptr);
        xs_pass = xs;
      }
      if (s.bf16_products) {  // and x
        round_to_bf16_values(xs_pass, images * p.C * p.L, xs);
        xs_pass = xs;
      }
      pointwise_conv_weight_grad(p, images, gy_pass, xs_pass, lanes);
    }
    if (gx)
      for (int64_t i = 0; i < images; ++i) {
        float* gxn = gx + (first + i) * s.image();
        pointwise_conv_product(p.C, p.O, p.L, w, 1, p.C, gy_pass + i * gy_floats, nullptr,
                               p.gathers() ? gxs : gxn);
        if (p.gathers()) pointwise_conv_scatter(p, gxs, gxn, accumulate_gx);
      }
  }
  if (gw) pointwise_conv_add_lanes(weights, lanes, gw);
}

// The backward of images [n0, n1): gx for them (when wanted; with accumulate_gx, which only the
// pointwise path takes, added into it), and their sums into gw (when
// wanted: [groups, O/g, K], or [groups, K, O/g] when gw_transposed()) and gb [O], which it
// overwrites. Images [n1, n_after) are the ones the thread runs next (whose lines the direct
// weight gradient asks for ahead).
// With gx_by_flipped_kernel(), wf is flipped_weights, and wft and wfp are its transposed_weights
// and pair_weights. At stride 2 on the direct path gx goes phase by phase, by stride2_gx.
template <typename T>
void backward_images(const ConvShape& s, const T* x, const T* w, const T* wf, const T* wft,
                     const uint32_t* wfp, const DirectConvInputGrad* stride2_gx, const T* gy, T* gx,
                     T* gw, double* gb, int64_t n0, int64_t n1, int64_t n_after,
                     bool accumulate_gx) {
  thread_local ScratchBuffer cols_scratch, gcols_scratch, rounded_gy_scratch;
  const int64_t Og = s.Og(), K = s.K, L = s.L;
  const ConvShape flipped = s.flipped();
  const bool direct_gw = s.direct() || s.direct_bf16();  // gw by the direct convolution
  if (gw && (n0 == n1 || direct_gw)) std::fill(gw, gw + s.O * K, T(0));
  if (gb) std::fill(gb, gb + s.O, 0.0);
  // gx of image n, where not by the flipped kernel
  auto gx_of_image = [&](int64_t n) {
    const T* gyn = gy + n * s.O * L;
    if (stride2_gx) {
      if constexpr (std::is_same_v<T, float>) {
        float* scratch = static_cast<float*>(
            gcols_scratch.get(sizeof(float) * size_t(stride2_gx->scratch_floats())));
        const float* gy_read = gyn;
        if (s.bf16_products) {
          float* rounded =
              static_cast<float*>(rounded_gy_scratch.get(sizeof(float) * size_t(s.O * L)));
          round_to_bf16_values(gyn, s.O * L, rounded);
          gy_read = rounded;
        }
        stride2_gx->run(gy_read, gx + n * s.image(), scratch);
      }
      return;
    }
    T* gxn = gx + n * s.image();
    // gcols straight into gx when cols is x, else into scratch for col2im
    T* gcols = s.cols_is_x() ? gxn : static_cast<T*>(gcols_scratch.get(sizeof(T) * s.cols()));
    for (int64_t g = 0; g < s.groups; ++g)
      product(s, true, false, K, L, Og, w + g * Og * K, K, gyn + g * Og * L, L, false,
              gcols + g * K * L, L);
    if (!s.cols_is_x()) {
      std::fill(gxn, gxn + s.image(), T(0));
      col2im_planes_overwriting(gcols, s.C, s.H, s.W, s.window, gxn);
    }
  };
  // gx of images [a, b): by the flipped kernel in one call (it sets up its shape and scratch once,
  // not once an image), else image by image
  auto gx_images = [&](int64_t a, int64_t b) {
    if (s.gx_by_flipped_kernel())
      return forward_images<T>(flipped, gy, wf, wft, wfp, nullptr, gx, a, b);
    for (int64_t n = a; n < b; ++n) gx_of_image(n);
  };
  bool pointwise = false, gx_by_passes = false;
  if constexpr (std::is_same_v<T, float>) {
    pointwise = s.pointwise();
    if (pointwise) pointwise_backward(s, x, w, gy, gx, gw, n0, n1, accumulate_gx);
    if (gw && s.direct()) {
      direct_backward(s, x, gy, gw, gx, n0, n1, n_after, gx_images);
      gx_by_passes = true;
    }
    if (gw && s.direct_bf16()) direct_bf16_weight_grad(s, x, gy, gw, n0, n1);
  }
  for (int64_t n = n0; n < n1; ++n) {
    const T* gyn = gy + n * s.O * L;
    if (gb)
      for (int64_t o = 0; o < s.O; ++o) {
        const T* row = gyn + o * L;
        double total = 0;
        _Pragma("omp simd reduction(+ : total)") for (int64_t l = 0; l < L; ++l) total += row[l];
        gb[o] += total;
      }
    if (pointwise) continue;
    if (gw && !direct_gw) {
      const T* cols = columns_of(s, x + n * s.image(), cols_scratch);
      const bool accumulate = n != n0;
      for (int64_t g = 0; g < s.groups; ++g)
        if (s.gw_transposed())
          product(s, false, true, K, Og, L, cols + g * K * L, L, gyn + g * Og * L, L, accumulate,
                  gw + g * K * Og, Og);
        else
          product(s, false, true, Og, K, L, gyn + g * Og * L, L, cols + g * K * L, L, accumulate,
                  gw + g * Og * K, K);
    }
    if (gx && !gx_by_passes && !s.gx_by_flipped_kernel()) gx_of_image(n);
  }
  if (gx && !gx_by_passes && s.gx_by_flipped_kernel()) gx_images(n0, n1);
}

// float32 and float64; under autocast where a bfloat16 kernel rounds float32 operands as it
// packs them (elsewhere the default's matmul makes the rounded copies).
bool runs_here(const Tensor& x) {
  return x.dtype() == DType::f64 ||
         (x.dtype() == DType::f32 &&
          (autocast_dtype() == DType::f32 || bf16_kernel() != Bf16Kernel::none));
}

}  // namespace

Conv2dForward CpuBackend::conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                         const Window2d& window, int64_t groups) {
  if (!runs_here(x)) return Backend::conv2d_forward(x, weight, bias, window, groups);
  const ConvShape s(x, weight, window, groups);
  Tensor y = Tensor::empty({s.N, s.O, window.out_h(s.H), window.out_w(s.W)}, x.dtype(), x.device());
  if (y.numel() == 0) return {y, Tensor()};
  QKV_DISPATCH_FLOAT(x.dtype(), "conv2d", [&] {
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    const std::vector<T> rounded = bf16_rounded_weights(s, weight.data<T>());
    const T* w = rounded.empty() ? weight.data<T>() : rounded.data();
    const std::vector<T> wt = transposed_weights(s, w);
    const std::vector<uint32_t> pairs = pair_weights(s, w);
    for_each_image_range(s.N, image_ranges(s.N), [&](int64_t, int64_t n0, int64_t n1) {
      forward_images<T>(s, x.data<T>(), w, wt.data(), pairs.data(), b, y.data<T>(), n0, n1);
    });
  });
  return {y, Tensor()};
}

// The pointwise kernel scatters gx's values into the positions the 1x1 windows read: at stride 2
// and above it adds them there instead, and never touches the rows between.
bool CpuBackend::conv2d_adds_into_gx(const Tensor& x, const Tensor& weight, const Window2d& window,
                                     int64_t groups) const {
  if (!runs_here(x)) return false;
  const ConvShape s(x, weight, window, groups);  // pointwise() is float32 only
  return s.pointwise() && s.pointwise_shape().gathers();
}

void CpuBackend::conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                 const Tensor& saved, const Window2d& window, int64_t groups,
                                 const Tensor& gx, const Tensor& gweight, const Tensor& gbias,
                                 bool accumulate_gx) {
  if (!runs_here(x) ||
      (accumulate_gx && gx.defined() && !conv2d_adds_into_gx(x, weight, window, groups)))
    return Backend::conv2d_backward(gy, x, weight, saved, window, groups, gx, gweight, gbias,
                                    accumulate_gx);
  const ConvShape s(x, weight, window, groups);
  QKV_DISPATCH_FLOAT(x.dtype(), "conv2d", [&] {
    const int64_t ranges = image_ranges(s.N), OK = s.O * s.K;
    // each range's partial sums, added in range order: kept between calls, and not zeroed, since
    // backward_images writes a range's sums whole (allocating and zeroing them was the calling
    // thread's work alone, before the ranges could start)
    thread_local ScratchBuffer gw_partial_scratch;
    T* gw_partial = gweight.defined()
                        ? static_cast<T*>(gw_partial_scratch.get(sizeof(T) * size_t(ranges * OK)))
                        : nullptr;
    std::vector<double> gb_partial(gbias.defined() ? size_t(ranges * s.O) : 0);
    const bool flipped = gx.defined() && s.gx_by_flipped_kernel();
    const std::vector<T> rounded = bf16_rounded_weights(s, weight.data<T>());
    const T* w = rounded.empty() ? weight.data<T>() : rounded.data();
    const std::vector<T> wf = flipped ? flipped_weights(s, w) : std::vector<T>();
    const std::vector<T> wft = flipped ? transposed_weights(s.flipped(), wf.data()) : wf;
    const std::vector<uint32_t> wfp =
        flipped ? pair_weights(s.flipped(), wf.data()) : std::vector<uint32_t>();
    // at stride 2 on the direct path, gx phase by phase (direct_conv.h): its sub-kernels made
    // once a call, not once a range (under autocast from w rounded, and gy is rounded per image)
    std::optional<DirectConvInputGrad> stride2_gx;
    if constexpr (std::is_same_v<T, float>)
      if (gx.defined() && (s.direct() || s.direct_bf16()) && s.window.stride_h == 2)
        stride2_gx.emplace(s.direct_shape(), w);
    for_each_image_range(s.N, ranges, [&](int64_t r, int64_t n0, int64_t n1) {
      // the next range, which a thread's contiguous share of the ranges runs next (at its end,
      // a pass's lines asked for in vain)
      const int64_t n_after = r + 1 < ranges ? (r + 2) * s.N / ranges : n1;
      backward_images<T>(s, x.data<T>(), w, wf.data(), wft.data(), wfp.data(),
                         stride2_gx ? &*stride2_gx : nullptr, gy.data<T>(),
                         gx.defined() ? gx.data<T>() : nullptr,
                         gweight.defined() ? gw_partial + r * OK : nullptr,
                         gbias.defined() ? gb_partial.data() + r * s.O : nullptr, n0, n1, n_after,
                         accumulate_gx && gx.defined());
    });
    if (gweight.defined()) {
      T* gw = gweight.data<T>();
      const int64_t Og = s.Og(), K = s.K;
      // the ranges added in order into the first, element by element in the partials' own layout
      // (read across a transposed layout, each element's sixteen terms were a cache line apart
      // each: 0.4 ms of a 3.9 ms weight gradient at [128, 64, 7, 7]), then put in place
      // (by both threads: the same order for each element, so the same bits)
      T* total = gw_partial;
      parallel_for(0, OK, 4096, [&](int64_t a0, int64_t a1) {
        for (int64_t r = 1; r < ranges; ++r) {
          const T* part = gw_partial + r * OK;
          for (int64_t at = a0; at < a1; ++at) total[at] += part[at];
        }
      });
      for (int64_t g = 0; g < s.groups; ++g) {
        if (s.gw_transposed())
          transpose_block(total + g * K * Og, K, Og, gw + g * Og * K);
        else
          std::copy(total + g * Og * K, total + (g + 1) * Og * K, gw + g * Og * K);
      }
    }
    if (gbias.defined()) {
      T* gb = gbias.data<T>();
      for (int64_t o = 0; o < s.O; ++o) {
        double total = 0;
        for (int64_t r = 0; r < ranges; ++r) total += gb_partial[size_t(r * s.O + o)];
        gb[o] = T(total);
      }
    }
  });
}

}  // namespace qkv::cpu
