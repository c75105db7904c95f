#include "nn/conv.h"

#include <cmath>

#include "engine/error.h"
#include "nn/init.h"

namespace qkv::nn {

Tensor pad2d(const Tensor& x, int64_t ph, int64_t pw, double value) {
  if (ph == 0 && pw == 0) return x;
  Tensor y = x;
  auto side = [&](int dim, int64_t n) {
    Shape s = y.shape();
    s[size_t(dim)] = n;
    return full(s, value, {y.dtype(), y.device()});
  };
  if (pw > 0) y = cat({side(3, pw), y, side(3, pw)}, 3);
  if (ph > 0) y = cat({side(2, ph), y, side(2, ph)}, 2);
  return y;
}

namespace {

// Appends `n` zero rows (dim 2) or columns (dim 3) at the far end.
Tensor extend(const Tensor& x, int dim, int64_t n) {
  if (n <= 0) return x;
  Shape s = x.shape();
  s[size_t(dim)] = n;
  return cat({x, zeros(s, {x.dtype(), x.device()})}, dim);
}

}  // namespace

Tensor unfold2d(const Tensor& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw) {
  QKV_CHECK(x.dim() == 4, "unfold2d", "expected [B, C, H, W], got ", shape_str(x.shape()));
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  QKV_CHECK(kh <= H && kw <= W && sh > 0 && sw > 0, "unfold2d", "kernel ", kh, "x", kw,
            " does not fit input ", shape_str(x.shape()));
  const int64_t Ho = (H - kh) / sh + 1, Wo = (W - kw) / sw + 1;
  // Kernel offset (i, j) sees the grid of rows i, i + sh, ..., i + sh (Ho - 1) (and likewise
  // columns), and that grid is a view: narrow to sh * Ho rows, split them into (Ho, sh), keep
  // index 0. A few zero rows at the end keep the narrow in range; they are never kept.
  Tensor xe = extend(extend(x, 2, kh - 1 + sh * Ho - H), 3, kw - 1 + sw * Wo - W);
  const int64_t We = xe.size(3);
  std::vector<Tensor> grids;
  for (int64_t i = 0; i < kh; ++i) {
    Tensor rows = select(xe.narrow(2, i, sh * Ho).reshape({B, C, Ho, sh, We}), 3, 0);
    for (int64_t j = 0; j < kw; ++j)
      grids.push_back(select(rows.narrow(3, j, sw * Wo).reshape({B, C, Ho, Wo, sw}), 4, 0));
  }
  // One copy, the same size as im2col's: [B, C, kh * kw, Ho, Wo].
  return stack(grids, 2).reshape({B, C, kh, kw, Ho, Wo});
}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t g, bool has_bias)
    : in_channels(in), out_channels(out), kernel_size(k), stride(s), padding(p), groups(g) {
  QKV_CHECK(in > 0 && out > 0 && k > 0 && s > 0 && p >= 0 && g > 0 && in % g == 0 && out % g == 0,
            "Conv2d", "bad configuration in=", in, " out=", out, " kernel=", k, " stride=", s,
            " padding=", p, " groups=", g);
  weight = register_parameter("weight", Tensor::empty({out, in / g, k, k}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));  // PyTorch's default, as for Linear
  if (has_bias) {
    bias = register_parameter("bias", Tensor::empty({out}));
    double bound = 1 / std::sqrt(double(init::fans(weight).fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, stride, padding, groups); }

std::string Conv2d::describe() const {
  return "Conv2d(" + std::to_string(in_channels) + " -> " + std::to_string(out_channels) +
         ", kernel " + std::to_string(kernel_size) + ", stride " + std::to_string(stride) + ")";
}

}  // namespace qkv::nn
