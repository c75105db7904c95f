// im2col and col2im: the data movement that turns a convolution into one GEMM.
//
// Both walk the same index map. For a fixed channel c and kernel tap (i, j), row (c, i, j) of
// cols is a strided sample of input plane c: output row oh reads input row oh * sh - ph + i * dh,
// output column ow reads input column ow * sw - pw + j * dw. Per output row, the columns that
// land inside the input form one contiguous range [lo, hi) of ow, so the inner loop has no
// bounds tests (and is a plain copy when the stride is 1); the rest is padding.
//
// Work is split over (image, channel) planes: each plane owns its kh * kw rows of cols and its
// own input plane, so col2im's accumulation needs no atomics and is deterministic.
#include <algorithm>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/im2col.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {

// The range [lo, hi) of output columns whose input column ow * stride + offset lies in [0, W).
struct ColumnRange {
  int64_t lo, hi;
};
ColumnRange valid_columns(int64_t offset, int64_t stride, int64_t W, int64_t Wo) {
  // smallest ow with ow * stride + offset >= 0, and first ow with ow * stride + offset >= W
  auto first_at_least = [&](int64_t target) {
    const int64_t need = target - offset;
    return need <= 0 ? 0 : (need + stride - 1) / stride;
  };
  const int64_t lo = std::min(first_at_least(0), Wo);
  const int64_t hi = std::max(lo, std::min(first_at_least(W), Wo));
  return {lo, hi};
}

// Calls fn(cols_row, x_row, range, iw0) for every (tap, output row) of one plane whose input row
// is inside the image, and pad(cols_row) for those above or below it. iw0 is the input column of
// ow = 0 (may be negative).
template <typename RowFn, typename PadFn>
void for_each_row(const Window2d& w, int64_t H, int64_t W, int64_t Ho, int64_t Wo, RowFn&& fn,
                  PadFn&& pad) {
  int64_t row = 0;  // row of cols within this plane: i * kw + j
  for (int64_t i = 0; i < w.kernel_h; ++i) {
    for (int64_t j = 0; j < w.kernel_w; ++j, ++row) {
      const int64_t iw0 = j * w.dilation_w - w.pad_w;
      const ColumnRange r = valid_columns(iw0, w.stride_w, W, Wo);
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
        const int64_t at = row * Ho * Wo + oh * Wo;  // offset of this output row in the plane
        if (ih < 0 || ih >= H)
          pad(at);
        else
          fn(at, ih * W, r, iw0);
      }
    }
  }
}

}  // namespace

// Stride 1 with as many output columns as input columns ("same" width): the in-image output rows
// [oh0, oh1) of one tap read one contiguous run of the input plane, [begin, end) of the cols row
// shifted by `shift`, except the few columns that wrap around a row's edge (ow outside [lo, hi)),
// which are padding.
bool same_width(const Window2d& w, int64_t W) {
  return w.stride_h == 1 && w.stride_w == 1 && w.out_w(W) == W;
}

struct TapRun {
  int64_t oh0, oh1;  // output rows whose input row is inside the image
  ColumnRange cols;  // output columns whose input column is inside the image
  int64_t begin, end, shift;
  bool empty() const { return oh0 == oh1 || cols.lo == cols.hi; }
};

TapRun tap_run(const Window2d& w, int64_t i, int64_t j, int64_t H, int64_t W) {
  const int64_t Ho = w.out_h(H);
  const int64_t ih_of_0 = i * w.dilation_h - w.pad_h;  // input row of output row 0
  const int64_t iw0 = j * w.dilation_w - w.pad_w;      // input column of output column 0
  TapRun t;
  t.oh0 = std::clamp<int64_t>(-ih_of_0, 0, Ho);
  t.oh1 = std::clamp<int64_t>(H - ih_of_0, t.oh0, Ho);
  t.cols = valid_columns(iw0, 1, W, W);
  t.begin = t.oh0 * W + t.cols.lo;
  t.end = std::max(t.begin, (t.oh1 - 1) * W + t.cols.hi);
  t.shift = ih_of_0 * W + iw0;  // cols entry p reads input entry p + shift
  return t;
}

// Sets the wrapped columns of the run's rows to `value`.
template <typename T>
void fill_wrapped(const TapRun& t, int64_t W, T* row, T value) {
  for (int64_t oh = t.oh0; oh < t.oh1; ++oh) {
    std::fill(row + oh * W, row + oh * W + t.cols.lo, value);
    std::fill(row + oh * W + t.cols.hi, row + (oh + 1) * W, value);
  }
}

// im2col of one plane for a same-width window: per tap, one copy of its run.
template <typename T>
void im2col_plane_same_width(const T* xs, int64_t H, int64_t W, const Window2d& w, T* cs, T padv) {
  const int64_t L = w.out_h(H) * W;
  for (int64_t i = 0, row = 0; i < w.kernel_h; ++i)
    for (int64_t j = 0; j < w.kernel_w; ++j, ++row) {
      const TapRun t = tap_run(w, i, j, H, W);
      T* dst = cs + row * L;
      if (t.empty()) {
        std::fill(dst, dst + L, padv);
        continue;
      }
      std::fill(dst, dst + t.oh0 * W, padv);
      std::copy(xs + (t.begin + t.shift), xs + (t.end + t.shift), dst + t.begin);
      fill_wrapped(t, W, dst, padv);
      std::fill(dst + t.oh1 * W, dst + L, padv);
    }
}

template <typename T>
void im2col_planes(const T* xp, int64_t planes, int64_t H, int64_t W, const Window2d& w, T* cp,
                   T padv) {
  const int64_t Ho = w.out_h(H), Wo = w.out_w(W), kk = w.kernel_h * w.kernel_w;
  const int64_t sw = w.stride_w;
  if (same_width(w, W)) {
    for (int64_t plane = 0; plane < planes; ++plane)
      im2col_plane_same_width(xp + plane * H * W, H, W, w, cp + plane * kk * Ho * Wo, padv);
    return;
  }
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xs = xp + plane * H * W;
    T* cs = cp + plane * kk * Ho * Wo;
    for_each_row(
        w, H, W, Ho, Wo,
        [&](int64_t at, int64_t x_row, ColumnRange r, int64_t iw0) {
          T* dst = cs + at;
          const T* src = xs + x_row;  // input row; output column ow reads ow * sw + iw0
          std::fill(dst, dst + r.lo, padv);
          if (sw == 1)
            std::copy(src + r.lo + iw0, src + r.hi + iw0, dst + r.lo);
          else if (sw == 2)  // a constant stride, which the compiler vectorizes
            for (int64_t ow = r.lo; ow < r.hi; ++ow) dst[ow] = src[ow * 2 + iw0];
          else
            for (int64_t ow = r.lo; ow < r.hi; ++ow) dst[ow] = src[ow * sw + iw0];
          std::fill(dst + r.hi, dst + Wo, padv);
        },
        [&](int64_t at) { std::fill(cs + at, cs + at + Wo, padv); });
  }
}

template <typename T>
void col2im_planes(const T* cp, int64_t planes, int64_t H, int64_t W, const Window2d& w, T* xp) {
  const int64_t Ho = w.out_h(H), Wo = w.out_w(W), kk = w.kernel_h * w.kernel_w;
  const int64_t sw = w.stride_w;
  for (int64_t plane = 0; plane < planes; ++plane) {
    T* xs = xp + plane * H * W;
    const T* cs = cp + plane * kk * Ho * Wo;
    for_each_row(
        w, H, W, Ho, Wo,
        [&](int64_t at, int64_t x_row, ColumnRange r, int64_t iw0) {
          const T* src = cs + at;
          T* dst = xs + x_row + iw0;  // output column ow adds into dst[ow * sw]
          if (sw == 1)                // unit stride spelled out: contiguous vectors, not scatters
            _Pragma("omp simd") for (int64_t ow = r.lo; ow < r.hi; ++ow) dst[ow] += src[ow];
          else
            for (int64_t ow = r.lo; ow < r.hi; ++ow) dst[ow * sw] += src[ow];
        },
        [](int64_t) {});  // padding positions have no input to receive them
  }
}

template <typename T>
void col2im_planes_overwriting(T* cp, int64_t planes, int64_t H, int64_t W, const Window2d& w,
                               T* xp) {
  if (!same_width(w, W)) return col2im_planes(cp, planes, H, W, w, xp);
  // Zeros in the wrapped columns let each tap's run be added as one contiguous range.
  const int64_t L = w.out_h(H) * W;
  for (int64_t plane = 0, row = 0; plane < planes; ++plane) {
    T* xs = xp + plane * H * W;
    for (int64_t i = 0; i < w.kernel_h; ++i)
      for (int64_t j = 0; j < w.kernel_w; ++j, ++row) {
        const TapRun t = tap_run(w, i, j, H, W);
        if (t.empty()) continue;
        T* src = cp + row * L;
        fill_wrapped(t, W, src, T(0));
        const int64_t shift = t.shift;
        _Pragma("omp simd") for (int64_t p = t.begin; p < t.end; ++p) xs[p + shift] += src[p];
      }
  }
}

template void im2col_planes<float>(const float*, int64_t, int64_t, int64_t, const Window2d&, float*,
                                   float);
template void im2col_planes<double>(const double*, int64_t, int64_t, int64_t, const Window2d&,
                                    double*, double);
template void col2im_planes<float>(const float*, int64_t, int64_t, int64_t, const Window2d&,
                                   float*);
template void col2im_planes<double>(const double*, int64_t, int64_t, int64_t, const Window2d&,
                                    double*);
template void col2im_planes_overwriting<float>(float*, int64_t, int64_t, int64_t, const Window2d&,
                                               float*);
template void col2im_planes_overwriting<double>(double*, int64_t, int64_t, int64_t, const Window2d&,
                                                double*);

void CpuBackend::im2col(const Tensor& x, const Window2d& w, const Tensor& cols, double pad_value) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t per_plane = w.kernel_h * w.kernel_w * w.out_h(H) * w.out_w(W);
  QKV_DISPATCH_FLOAT(x.dtype(), "im2col", [&] {
    const T* xp = x.data<T>();
    T* cp = cols.data<T>();
    parallel_for(0, N * C, 1, [&](int64_t b, int64_t e) {
      im2col_planes(xp + b * H * W, e - b, H, W, w, cp + b * per_plane, T(pad_value));
    });
  });
}

void CpuBackend::col2im(const Tensor& cols, const Window2d& w, const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t per_plane = w.kernel_h * w.kernel_w * w.out_h(H) * w.out_w(W);
  QKV_DISPATCH_FLOAT(x.dtype(), "col2im", [&] {
    const T* cp = cols.data<T>();
    T* xp = x.data<T>();
    parallel_for(0, N * C, 1, [&](int64_t b, int64_t e) {
      col2im_planes(cp + b * per_plane, e - b, H, W, w, xp + b * H * W);
    });
  });
}

}  // namespace qkv::cpu
