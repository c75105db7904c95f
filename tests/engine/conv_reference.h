// The convolution computed another way, for the conv tests: direct loops in double.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace qkv::testing {

// conv2d by loops over every (output, tap) pair: y, and for the loss sum(y * g) the gradients dx,
// dw, db (zeros when g is undefined).
struct ConvReference {
  std::vector<double> y, gx, gw, gb;
};

inline ConvReference direct_conv2d(const Tensor& x, const Tensor& w, const Tensor& b,
                                   const Tensor& g, int64_t s, int64_t p, int64_t groups) {
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const auto bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t Ho = (H + 2 * p - kh) / s + 1, Wo = (W + 2 * p - kw) / s + 1;
  const auto gv = g.defined() ? g.to_vector<double>() : std::vector<double>();
  ConvReference r{std::vector<double>(size_t(N * O * Ho * Wo)), std::vector<double>(xv.size()),
                  std::vector<double>(wv.size()), std::vector<double>(size_t(O))};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const size_t at = size_t(((n * O + o) * Ho + oh) * Wo + ow);
          double acc = bv.empty() ? 0 : bv[size_t(o)];
          const double gy = gv.empty() ? 0 : gv[at];
          r.gb[size_t(o)] += gy;
          for (int64_t cg = 0; cg < Cg; ++cg) {
            const int64_t c = o / (O / groups) * Cg + cg;
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * s - p + i, iw = ow * s - p + j;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const size_t xi = size_t(((n * C + c) * H + ih) * W + iw);
                const size_t wi = size_t(((o * Cg + cg) * kh + i) * kw + j);
                acc += xv[xi] * wv[wi];
                r.gx[xi] += gy * wv[wi];
                r.gw[wi] += gy * xv[xi];
              }
          }
          r.y[at] = acc;
        }
  return r;
}

}  // namespace qkv::testing
