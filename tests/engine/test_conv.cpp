// conv2d, max_pool2d and avg_pool2d against direct loops over the definition, and im2col/col2im
// against each other (col2im must be im2col's adjoint: <im2col(x), c> = <x, col2im(c)>).
#include <cmath>
#include <limits>
#include <vector>

#include "engine/backend.h"
#include "engine/ops.h"
#include "tests/engine/conv_reference.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_error;
using qkv::testing::check_values;

namespace {

Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  Generator gen(seed);
  return uniform(shape, -1, 1, {dtype}, &gen);
}

// max (or mean, padding counted) over each k x k window
std::vector<double> naive_pool(const Tensor& x, int64_t k, int64_t s, int64_t p, bool is_max) {
  const auto xv = x.to_vector<double>();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
  std::vector<double> out;
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t ih = oh * s - p + i, iw = ow * s - p + j;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            const double v = xv[size_t((nc * H + ih) * W + iw)];
            acc = is_max ? std::max(acc, v) : acc + v;
          }
        out.push_back(is_max ? acc : acc / double(k * k));
      }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv)

BOOST_AUTO_TEST_CASE(conv2d_matches_the_definition) {
  struct Case {
    Shape x, w;
    int64_t stride, padding, groups;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, 1, 1, 1, true},   // "same" padding
      {{1, 2, 8, 9}, {3, 2, 3, 2}, 2, 0, 1, false},  // stride 2, non-square kernel, remainder
      {{2, 4, 6, 6}, {6, 2, 3, 3}, 2, 1, 2, true},   // groups
      {{1, 4, 5, 5}, {4, 1, 3, 3}, 1, 2, 4, false},  // depthwise, padding larger than needed
      {{1, 3, 4, 4}, {5, 3, 1, 1}, 1, 0, 1, true},   // 1x1
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    Tensor x = random(c.x, seed++), w = random(c.w, seed++);
    Tensor b = c.bias ? random({c.w[0]}, seed++) : Tensor();
    Tensor y = conv2d(x, w, b, c.stride, c.padding, c.groups);
    check_values(y, testing::direct_conv2d(x, w, b, Tensor(), c.stride, c.padding, c.groups).y,
                 1e-12);
    // float32 through the same path
    Tensor yf = conv2d(x.to(DType::f32), w.to(DType::f32),
                       b.defined() ? b.to(DType::f32) : Tensor(), c.stride, c.padding, c.groups);
    check_values(yf, testing::direct_conv2d(x, w, b, Tensor(), c.stride, c.padding, c.groups).y,
                 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(pooling_matches_the_definition) {
  Tensor x = random({2, 3, 7, 8}, 11);
  check_values(max_pool2d(x, 3, 2, 1), naive_pool(x, 3, 2, 1, true), 0);
  check_values(max_pool2d(x, 2), naive_pool(x, 2, 2, 0, true), 0);
  check_values(avg_pool2d(x, 3, 2, 1), naive_pool(x, 3, 2, 1, false), 1e-12);
  check_values(avg_pool2d(x, 2), naive_pool(x, 2, 2, 0, false), 1e-12);
}

BOOST_AUTO_TEST_CASE(max_pool_gradient_goes_to_the_first_maximum) {
  // one window holding a tie: the gradient goes to the first of the two 5s only
  Tensor x = tensor({1, 5, 5, 2}, {1, 1, 2, 2}).requires_grad_();
  sum(max_pool2d(x, 2)).backward();
  check_values(x.grad(), {0, 1, 0, 0});
}

BOOST_AUTO_TEST_CASE(col2im_is_the_adjoint_of_im2col) {
  const Window2d w{.kernel_h = 3,
                   .kernel_w = 2,
                   .stride_h = 2,
                   .stride_w = 1,
                   .pad_h = 1,
                   .pad_w = 2,
                   .dilation_h = 2,
                   .dilation_w = 1};
  const int64_t N = 2, C = 3, H = 9, W = 7, L = w.out_h(H) * w.out_w(W);
  Tensor x = random({N, C, H, W}, 21), c = random({N, C * 6, L}, 22);
  Backend& be = x.backend();
  Tensor cols = Tensor::empty(c.shape(), DType::f64);
  be.im2col(x, w, cols, 0);
  Tensor back = zeros(x.shape(), {DType::f64});
  be.col2im(c, w, back);
  const double lhs = sum(mul(cols, c)).item(), rhs = sum(mul(x, back)).item();
  BOOST_TEST(std::abs(lhs - rhs) <= 1e-12 * std::abs(lhs));
  // and one entry by hand: row (c=1, i=2, j=1), output (oh=1, ow=0) reads x[0][1][1*2-1+4][0-2+1]
  // = column -1: padding
  const int64_t row = (1 * 3 + 2) * 2 + 1, Wo = w.out_w(W);
  BOOST_TEST(cols.to_vector<double>()[size_t(row * L + 1 * Wo + 0)] == 0.0);
  // ow=3 reads column 3 - 2 + 1 = 2 of row 5
  BOOST_TEST(cols.to_vector<double>()[size_t(row * L + 1 * Wo + 3)] ==
             x.to_vector<double>()[size_t((1 * H + 5) * W + 2)]);
}

BOOST_AUTO_TEST_CASE(conv2d_rejects_bad_shapes) {
  Tensor x = zeros({1, 4, 5, 5}, {DType::f64});
  check_error([&] { conv2d(x, zeros({2, 3, 3, 3}, {DType::f64})); }, {"conv2d", "groups"});
  check_error([&] { conv2d(x, zeros({2, 4, 7, 7}, {DType::f64})); }, {"conv2d", "does not fit"});
  check_error(
      [&] {
        conv2d(x, zeros({2, 4, 3, 3}, {DType::f64}), zeros({3}, {DType::f64}));
      },
      {"conv2d", "bias"});
  check_error([&] { max_pool2d(x, 2, 2, 2); }, {"max_pool2d", "padding"});
}

BOOST_AUTO_TEST_SUITE_END()
