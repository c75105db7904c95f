// The CPU's conv2d kernels (engine/cpu/conv2d_kernels.cpp: image by image, ranges of images per
// thread, 1x1 columns read in place, the contiguous im2col of stride-1 "same"-width windows)
// against the convolution and its three gradients computed by direct loops, and against
// Backend's composed default on the same inputs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autocast.h"
#include "engine/backend.h"
#include "engine/cpu/direct_conv.h"
#include "engine/cpu/direct_conv_bf16.h"
#include "engine/cpu/gemm_bf16.h"
#include "engine/cpu/winograd_conv.h"
#include "engine/ops.h"
#include "tests/engine/conv_reference.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_values;
using qkv::testing::ThreadCount;

namespace {

// The window of a kernel of weight shape w [O, C, kh, kw] at a stride and padding along both axes.
Window2d window_of(const Shape& w, int64_t stride, int64_t padding) {
  return {.kernel_h = w[2],
          .kernel_w = w[3],
          .stride_h = stride,
          .stride_w = stride,
          .pad_h = padding,
          .pad_w = padding};
}

struct ConvCase {
  Shape x, w;
  int64_t stride, padding, groups;
  bool bias;
};

// Every branch of the kernels: batch ranges with a remainder (5 and 3 images over 2 threads),
// one image (the GEMMs thread instead), groups, stride 2, 1x1 with and without the in-place
// columns, the contiguous im2col with rows of padding and Ho != H, odd sizes, and the products'
// two layouts (fewer and more than 32 output channels a group; few and many output positions),
// and gx at stride 1 as a convolution by the flipped kernel (and where its padding would be
// negative, a 1 x 3 kernel with padding 1, not).
const std::vector<ConvCase> kCases = {
    {{5, 3, 7, 6}, {4, 3, 3, 3}, 1, 1, 1, true},     // "same" 3x3: contiguous im2col
    {{3, 4, 9, 5}, {6, 2, 3, 3}, 2, 1, 2, true},     // groups, stride 2
    {{1, 2, 8, 9}, {3, 2, 3, 2}, 2, 0, 1, false},    // one image, non-square kernel, remainder
    {{4, 4, 5, 5}, {4, 1, 3, 3}, 1, 2, 4, false},    // depthwise, padding wider than the kernel
    {{3, 6, 4, 5}, {5, 6, 1, 1}, 1, 0, 1, true},     // 1x1: cols is x
    {{3, 4, 5, 7}, {6, 2, 1, 1}, 1, 0, 2, false},    // 1x1 in place, with groups
    {{2, 3, 5, 7}, {4, 3, 1, 1}, 2, 1, 1, true},     // 1x1 with stride and padding: im2col
    {{3, 2, 6, 5}, {3, 2, 1, 3}, 1, 1, 1, true},     // 1x3 "same" width: Ho = H + 2
    {{2, 3, 11, 13}, {2, 3, 5, 5}, 1, 2, 1, true},   // 5x5 "same": two wrapped columns a side
    {{2, 2, 6, 6}, {3, 2, 3, 3}, 1, 0, 1, true},     // no padding: Wo != W, the row-wise im2col
    {{3, 2, 5, 4}, {64, 1, 3, 3}, 1, 1, 2, true},    // 32 channels a group: gW^T's products
    {{2, 3, 5, 5}, {33, 3, 3, 3}, 2, 1, 1, false},   // gW^T with a ragged tile of channels
    {{2, 2, 17, 16}, {32, 2, 3, 3}, 1, 1, 1, true},  // gW^T, but W @ cols at 272 positions
    {{2, 32, 6, 6}, {4, 32, 3, 3}, 1, 1, 1, true},   // gx by a flipped kernel to 32 channels
    {{2, 5, 6, 7}, {4, 5, 2, 3}, 1, 1, 1, false},    // flipped 2x3: paddings 0 and 1
    // float32 at stride 1 with one group takes the direct convolution (direct_conv.h): its tiles
    // of 16, 32 and 64 output channels across lanes for gW, with rows left over; 15 channels
    // (blocks of 8, 4, 2, 1) and 5- and 7-wide kernels (gW with positions across lanes, taps
    // left over: 3, 5, 2 and 1); a 7x7 to one channel (CBAM's); and images too large for two in
    // a pass of gW.
    {{3, 16, 9, 11}, {16, 16, 3, 3}, 1, 1, 1, true},
    {{2, 3, 7, 9}, {16, 3, 3, 3}, 1, 1, 1, false},  // 16 channels: 8 rows and one left over
    {{2, 1, 6, 6}, {16, 1, 3, 3}, 1, 1, 1, true},   // the stem's 1 -> 16: three rows left over
    {{2, 5, 7, 6}, {32, 5, 3, 3}, 1, 1, 1, false},
    {{2, 3, 5, 6}, {64, 3, 3, 3}, 1, 1, 1, true},
    // its forward with 32 and 64 channels across lanes where rows of Wq positions would waste
    // more than a tenth: a position left over from the tiles of 6 (64 channels) and two from
    // those of 7 (32), with a bias
    {{2, 3, 5, 5}, {64, 3, 3, 3}, 1, 1, 1, true},
    {{2, 4, 6, 5}, {32, 4, 3, 3}, 1, 1, 1, true},
    {{2, 3, 8, 9}, {15, 3, 5, 3}, 1, 2, 1, true},
    {{2, 5, 6, 7}, {16, 5, 5, 5}, 1, 2, 1, false},
    {{2, 2, 13, 12}, {1, 2, 7, 7}, 1, 3, 1, false},
    {{2, 1, 9, 8}, {3, 1, 7, 7}, 1, 3, 1, true},
    {{17, 2, 40, 40}, {64, 2, 3, 3}, 1, 1, 1, true},
    // ranges of two and three images in passes of two and one (the weight gradient and gx pass by
    // pass, each pass's tiles asking for the next pass's lines, the range's last for the next
    // range's), with gx by the flipped kernel and, at stride 2, by phases in passes of one image
    {{33, 16, 40, 40}, {16, 16, 3, 3}, 1, 1, 1, false},
    {{33, 8, 80, 80}, {16, 8, 3, 3}, 2, 1, 1, false},
    // and at stride 2, on phase planes: 16, 32 and 64 channels across lanes (odd and even
    // padded sizes), 1x2 without padding, 7x7 with 5 channels, and rows of 37 (a padded row split
    // into phases of 20: two vectors each)
    {{2, 3, 9, 10}, {16, 3, 3, 3}, 2, 1, 1, true},
    {{2, 3, 5, 37}, {16, 3, 3, 3}, 2, 1, 1, false},
    {{3, 5, 8, 8}, {32, 5, 3, 3}, 2, 1, 1, false},
    {{2, 4, 7, 6}, {64, 4, 3, 3}, 2, 1, 1, true},
    {{2, 32, 8, 7}, {16, 32, 3, 3}, 2, 1, 1, true},  // gx's phases with 32 channels across lanes
    {{2, 6, 8, 7}, {10, 6, 1, 2}, 2, 0, 1, true},
    {{2, 2, 15, 13}, {5, 2, 7, 7}, 2, 3, 1, false},
    // a 3x3 window at stride 1 with padding 1 and enough channels (winograd_conv_takes) takes
    // Winograd's F(2x2, 3x3) (winograd_conv.h) for y and gx: odd and even sizes (the last tiles
    // half outside), rows of 28 (the widest it takes), output channels in tiles of 8, 4 and 1 (17,
    // 20, 48: y's and gx's), groups of several images and of one (ranges of 2 and 3 images), tiles
    // in register tiles of 3, 2 and 1 vectors
    {{37, 48, 5, 6}, {17, 48, 3, 3}, 1, 1, 1, true},
    {{2, 16, 21, 28}, {20, 16, 3, 3}, 1, 1, 1, true},
    {{3, 24, 15, 27}, {16, 24, 3, 3}, 1, 1, 1, false},
    {{5, 32, 7, 7}, {32, 32, 3, 3}, 1, 1, 1, true},
    // a 1x1 window without padding takes the pointwise convolution (pointwise_conv.h): at stride
    // 1 with tiles of 8, 4, 2 and 1 output channels (15) and of 3, 2 and 1 vectors of positions
    // (a ragged last one); at stride 2 from odd and even sizes, and from rows of 37 (19 output
    // columns: two vectors to gather and to scatter), with 6 and 7 input channels (the weight
    // gradient's tiles of 4, 2 and 1); at stride 3 without the vector gather
    {{3, 7, 9, 13}, {15, 7, 1, 1}, 1, 0, 1, true},
    {{3, 6, 9, 8}, {9, 6, 1, 1}, 2, 0, 1, true},
    {{2, 7, 6, 37}, {32, 7, 1, 1}, 2, 0, 1, false},
    {{2, 16, 28, 28}, {32, 16, 1, 1}, 2, 0, 1, false},
    {{2, 5, 8, 10}, {6, 5, 1, 1}, 3, 0, 1, true},
    // and its weight gradient over several images at once: ranges of 2 and 3 images in one pass,
    // and images too large for two in a pass
    {{40, 3, 6, 5}, {4, 3, 1, 1}, 2, 0, 1, false},
    {{17, 24, 48, 48}, {24, 24, 1, 1}, 1, 0, 1, false},
};

Tensor random(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return uniform(shape, -1, 1, {dtype}, &gen);
}

void check_case(const ConvCase& c, DType dtype, double tol, uint64_t seed) {
  Tensor x = random(c.x, seed, dtype).requires_grad_();
  Tensor w = random(c.w, seed + 1, dtype).requires_grad_();
  Tensor b = c.bias ? random({c.w[0]}, seed + 2, dtype).requires_grad_() : Tensor();
  Tensor y = conv2d(x, w, b, c.stride, c.padding, c.groups);
  Tensor g = random(y.shape(), seed + 3, dtype);
  sum(mul(y, g)).backward();
  const testing::ConvReference want =
      testing::direct_conv2d(x, w, b, g, c.stride, c.padding, c.groups);
  // tol relative to the largest expected value: a weight's gradient sums tens of thousands of
  // float32 products in the largest case
  auto check = [tol](const Tensor& got, const std::vector<double>& expected) {
    double largest = 1;
    for (double e : expected) largest = std::max(largest, std::abs(e));
    check_values(got, expected, tol * largest);
  };
  check(y, want.y);
  check(x.grad(), want.gx);
  check(w.grad(), want.gw);
  if (c.bias) check(b.grad(), want.gb);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv_kernels)

BOOST_AUTO_TEST_CASE(conv2d_and_its_gradients_equal_direct_loops_at_one_and_two_threads) {
  for (int threads : {1, 2}) {
    ThreadCount count(threads);
    uint64_t seed = 100;
    for (const ConvCase& c : kCases) {
      BOOST_TEST_CONTEXT("threads " << threads << ", x " << shape_str(c.x) << ", w "
                                    << shape_str(c.w) << ", stride " << c.stride << ", padding "
                                    << c.padding << ", groups " << c.groups) {
        check_case(c, DType::f64, 1e-12, seed);
        check_case(c, DType::f32, 2e-5, seed);
      }
      seed += 10;
    }
  }
}

// The batch is split into ranges of images by a constant, not by the thread count, and their
// partial weight and bias gradients are added in range order: the same bits at one thread and two,
// with 37 images (16 ranges of 2 or 3) and with 5 (one image a range), for a 3x3 window (the
// direct convolution) and a 1x1 one at stride 2 (the pointwise one). With 32 channels each way
// the 3x3 weight gradient's 9216 sums are more than one chunk of the threads' shared adding of
// the ranges, so two threads add different elements.
// In float32 and under autocast (bfloat16 products: the direct convolution's bfloat16 twin and
// the pointwise kernel on rounded operands where the CPU's bfloat16 kernel is VDPBF16PS).
BOOST_AUTO_TEST_CASE(conv2d_gives_the_same_bits_at_one_thread_and_two) {
  for (DType precision : {DType::f32, DType::bf16})
    for (const Shape& xs : {Shape{37, 4, 9, 9}, Shape{5, 4, 9, 9}, Shape{37, 32, 9, 9}})
      for (int64_t k : {3, 1}) {
        const int64_t C = xs[1], O = C == 32 ? 32 : 6;
        Tensor x = random(xs, 11, DType::f32), w = random({O, C, k, k}, 12, DType::f32);
        Tensor b = random({O}, 13, DType::f32);
        auto run = [&](int threads) {
          const ThreadCount count(threads);
          Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_(),
                 bg = b.detach().requires_grad_();
          Tensor y;
          {
            Autocast scope(precision);
            y = k == 3 ? conv2d(xg, wg, bg, 1, 1) : conv2d(xg, wg, bg, 2, 0);
          }
          sum(mul(y, y)).backward();
          return std::vector<Tensor>{y, xg.grad(), wg.grad(), bg.grad()};
        };
        const std::vector<Tensor> one = run(1), two = run(2);
        for (size_t i = 0; i < one.size(); ++i)
          BOOST_TEST(qkv::testing::equal_values(one[i], two[i]),
                     dtype_name(precision)
                         << " products, " << shape_str(xs) << ", " << k << "x" << k << ": output "
                         << i << " differs between 1 and 2 threads");
      }
}

// Only the gradients asked for are computed: an input that needs none gets none, and the others
// are the same as when every gradient is wanted: a 3x3 window in float64 (im2col) and a 1x1 one at
// stride 2 in float32 (the pointwise convolution, which has a backward of its own).
BOOST_AUTO_TEST_CASE(conv2d_computes_only_the_wanted_gradients) {
  struct Case {
    DType dtype;
    int64_t kernel, stride, padding;
    double tol;
  };
  for (const Case& c : {Case{DType::f64, 3, 1, 1, 1e-12}, Case{DType::f32, 1, 2, 0, 1e-5}}) {
    const int64_t out = (6 + 2 * c.padding - c.kernel) / c.stride + 1;
    Tensor x = random({3, 4, 6, 6}, 7, c.dtype), w = random({5, 4, c.kernel, c.kernel}, 8, c.dtype);
    Tensor b = random({5}, 9, c.dtype), g = random({3, 5, out, out}, 10, c.dtype);
    const testing::ConvReference want = testing::direct_conv2d(x, w, b, g, c.stride, c.padding, 1);
    w.requires_grad_();
    sum(mul(conv2d(x, w, b, c.stride, c.padding), g)).backward();
    BOOST_TEST(!x.grad().defined());
    check_values(w.grad(), want.gw, c.tol);
    Tensor x2 = x.detach().requires_grad_();
    sum(mul(conv2d(x2, w.detach(), b, c.stride, c.padding), g)).backward();
    check_values(x2.grad(), want.gx, c.tol);
  }
}

// The direct forward with the output channels across lanes (at the Ho * Wo positions alone) adds
// each output's taps in the order the rows of Wq positions add them: the same bits, for the output
// and for gx, a forward of gy by the flipped kernel at stride 1 and by four sub-kernels at stride 2
// (lanes where x has 32 channels).
// Every shape's forward here takes the lanes.
BOOST_AUTO_TEST_CASE(direct_forward_gives_the_same_bits_with_channels_or_positions_in_lanes) {
  if (!cpu::direct_conv_enabled()) return;  // no AVX-512: there is one layout only
  struct Case {
    Shape x, w;
    int64_t stride;
  };
  uint64_t seed = 500;
  for (const Case& c :
       {Case{{3, 5, 7, 7}, {64, 5, 3, 3}, 1}, Case{{2, 6, 14, 14}, {32, 6, 3, 3}, 1},
        Case{{2, 3, 5, 5}, {64, 3, 3, 3}, 1}, Case{{2, 4, 14, 14}, {64, 4, 3, 3}, 2},
        Case{{3, 5, 9, 8}, {32, 5, 3, 3}, 2}, Case{{2, 32, 7, 7}, {32, 32, 3, 3}, 1},
        Case{{2, 32, 8, 7}, {16, 32, 3, 3}, 2}}) {
    BOOST_TEST_CONTEXT("x " << shape_str(c.x) << ", w " << shape_str(c.w) << ", stride "
                            << c.stride) {
      // the forward takes the lanes, or (32 input channels at stride 2) gx's phases do
      const cpu::DirectConvShape d(c.x[1], c.x[2], c.x[3], c.w[0], 3, 3, 1, 1, c.stride);
      BOOST_TEST((d.forward_in_channel_lanes() || (c.stride == 2 && c.x[1] % 32 == 0)));
      Tensor x = random(c.x, seed, DType::f32), w = random(c.w, seed + 1, DType::f32);
      Tensor b = random({c.w[0]}, seed + 2, DType::f32);
      auto run = [&](bool lanes) {
        cpu::set_winograd_conv_use(cpu::WinogradUse::off);  // [2, 32, 7, 7] -> 32 would take it
        cpu::set_direct_conv_forward_lanes_enabled(lanes);
        Tensor xg = x.detach().requires_grad_();
        Tensor y = conv2d(xg, w, b, c.stride, 1, 1);
        sum(mul(y, random(y.shape(), seed + 3, DType::f32))).backward();
        cpu::set_direct_conv_forward_lanes_enabled(true);
        cpu::set_winograd_conv_use(cpu::WinogradUse::where_faster);
        return std::vector<Tensor>{y.detach(), xg.grad()};
      };
      const std::vector<Tensor> rows = run(false), lanes = run(true);
      BOOST_TEST(testing::equal_values(rows[0], lanes[0]));
      BOOST_TEST(testing::equal_values(rows[1], lanes[1]));
    }
    seed += 10;
  }
}

// The CNN's 3x3 layers at stride 1 take Winograd's F(2x2, 3x3) for y and gx, and it is as close
// to the direct loops' float64 values as the direct convolution: its transforms add and subtract
// before the products, which costs a few units in the last place, not more.
BOOST_AUTO_TEST_CASE(winograd_takes_the_cnns_layers_as_close_to_exact_as_the_direct_convolution) {
  if (!cpu::direct_conv_enabled()) return;  // no AVX-512
  uint64_t seed = 700;
  for (const Shape& xs : {Shape{2, 16, 28, 28}, Shape{3, 32, 14, 14}, Shape{6, 64, 7, 7}}) {
    BOOST_TEST_CONTEXT("x " << shape_str(xs)) {
      BOOST_TEST(cpu::winograd_conv_takes(xs[1], xs[2], xs[3], xs[1]));
      Tensor x = random(xs, seed, DType::f32),
             w = random({xs[1], xs[1], 3, 3}, seed + 1, DType::f32);
      Tensor b = random({xs[1]}, seed + 2, DType::f32);
      Tensor g = random(xs, seed + 3, DType::f32);
      const testing::ConvReference want = testing::direct_conv2d(x, w, b, g, 1, 1, 1);
      // the largest error from the exact values, relative to the largest value
      auto error = [](const Tensor& got, const std::vector<double>& exact) {
        double largest = 0, worst = 0;
        const std::vector<float> values = got.to_vector<float>();
        for (size_t i = 0; i < exact.size(); ++i) {
          largest = std::max(largest, std::abs(exact[i]));
          worst = std::max(worst, std::abs(double(values[i]) - exact[i]));
        }
        return worst / largest;
      };
      std::vector<double> errors;  // y's and gx's, by Winograd then by the direct convolution
      for (bool winograd : {true, false}) {
        cpu::set_winograd_conv_use(winograd ? cpu::WinogradUse::where_faster
                                            : cpu::WinogradUse::off);
        Tensor xg = x.detach().requires_grad_();
        Tensor y = conv2d(xg, w, b, 1, 1, 1);
        sum(mul(y, g)).backward();
        cpu::set_winograd_conv_use(cpu::WinogradUse::where_faster);
        errors.push_back(error(y, want.y));
        errors.push_back(error(xg.grad(), want.gx));
      }
      BOOST_TEST_MESSAGE("errors " << errors[0] << " " << errors[1] << " " << errors[2] << " "
                                   << errors[3]);
      BOOST_TEST(errors[0] < 2 * std::max(errors[2], 1e-7));
      BOOST_TEST(errors[1] < 2 * std::max(errors[3], 1e-7));
    }
    seed += 10;
  }
}

// The CPU's kernels and Backend's composed default (what CUDA and autocast run) agree.
BOOST_AUTO_TEST_CASE(the_cpu_kernels_equal_the_composed_default) {
  uint64_t seed = 300;
  for (const ConvCase& c : kCases) {
    BOOST_TEST_CONTEXT("x " << shape_str(c.x) << ", w " << shape_str(c.w)) {
      Tensor x = random(c.x, seed, DType::f64), w = random(c.w, seed + 1, DType::f64);
      Tensor b = c.bias ? random({c.w[0]}, seed + 2, DType::f64) : Tensor();
      const Window2d win = window_of(c.w, c.stride, c.padding);
      Backend& cpu = x.backend();
      const Conv2dForward mine = cpu.conv2d_forward(x, w, b, win, c.groups);
      const Conv2dForward composed = cpu.Backend::conv2d_forward(x, w, b, win, c.groups);
      BOOST_TEST(!mine.saved.defined());
      check_values(mine.y, composed.y.to_vector<double>(), 1e-12);
      Tensor gy = random(mine.y.shape(), seed + 3, DType::f64);
      auto grads_of = [&](bool default_kernel, const Tensor& saved) {
        std::vector<Tensor> out = {Tensor::empty(x.shape(), DType::f64),
                                   Tensor::empty(w.shape(), DType::f64),
                                   Tensor::empty({c.w[0]}, DType::f64)};
        if (default_kernel)
          cpu.Backend::conv2d_backward(gy, x, w, saved, win, c.groups, out[0], out[1], out[2]);
        else
          cpu.conv2d_backward(gy, x, w, saved, win, c.groups, out[0], out[1], out[2]);
        return out;
      };
      const std::vector<Tensor> a = grads_of(false, Tensor()), d = grads_of(true, composed.saved);
      for (size_t i = 0; i < a.size(); ++i) check_values(a[i], d[i].to_vector<double>(), 1e-12);
    }
    seed += 10;
  }
}

// conv2d_backward with accumulate_gx adds x's gradient into the sum gx holds: sum + gradient, the
// backward sweep's own order, so the same bits as the gradient made alone and then added. The CPU
// says it does so in place for a 1x1 window without padding at stride 2 and above in float32 (the
// pointwise kernel: stride 2's vectors, rows wider than one vector and ragged, stride 3's loop;
// under autocast on rounded operands), and adds a gradient made apart elsewhere (a 3x3 window, a
// padded 1x1, float64, and Backend's composed default). At one and two threads.
BOOST_AUTO_TEST_CASE(conv2d_backward_adds_its_input_gradient_into_a_sum) {
  struct Case {
    Shape x, w;
    int64_t stride, padding;
    DType dtype, precision;
  };
  uint64_t seed = 700;
  for (const Case& c : {Case{{5, 4, 9, 9}, {6, 4, 1, 1}, 2, 0, DType::f32, DType::f32},
                        Case{{3, 3, 10, 40}, {5, 3, 1, 1}, 2, 0, DType::f32, DType::f32},
                        Case{{3, 16, 28, 28}, {32, 16, 1, 1}, 2, 0, DType::f32, DType::f32},
                        Case{{2, 3, 10, 11}, {4, 3, 1, 1}, 3, 0, DType::f32, DType::f32},
                        Case{{3, 4, 9, 9}, {6, 4, 1, 1}, 2, 0, DType::f32, DType::bf16},
                        Case{{3, 4, 9, 9}, {6, 4, 3, 3}, 2, 1, DType::f32, DType::f32},
                        Case{{3, 4, 9, 9}, {6, 4, 1, 1}, 2, 1, DType::f32, DType::f32},
                        Case{{3, 4, 9, 9}, {6, 4, 1, 1}, 2, 0, DType::f64, DType::f32}})
    for (int threads : {1, 2}) {
      BOOST_TEST_CONTEXT("x " << shape_str(c.x) << " " << dtype_name(c.dtype) << ", w "
                              << shape_str(c.w) << ", stride " << c.stride << ", padding "
                              << c.padding << ", " << dtype_name(c.precision) << " products, "
                              << threads << " threads") {
        const ThreadCount count(threads);
        Autocast scope(c.precision);
        Tensor x = random(c.x, seed, c.dtype), w = random(c.w, seed + 1, c.dtype);
        const Window2d win = window_of(c.w, c.stride, c.padding);
        Backend& cpu = x.backend();
        const Tensor gy =
            random(cpu.conv2d_forward(x, w, Tensor(), win, 1).y.shape(), seed + 2, c.dtype);
        const Tensor sum = random(c.x, seed + 3, c.dtype);
        const bool in_place =
            c.dtype == DType::f32 && c.padding == 0 && c.w[2] == 1 && cpu::direct_conv_enabled() &&
            (c.precision == DType::f32 || cpu::bf16_kernel() != cpu::Bf16Kernel::none);
        BOOST_TEST(cpu.conv2d_adds_into_gx(x, w, win, 1) == in_place);
        const Tensor apart = Tensor::empty(c.x, c.dtype), gw = Tensor::empty(c.w, c.dtype);
        cpu.conv2d_backward(gy, x, w, Tensor(), win, 1, apart, gw, Tensor());
        const Tensor expected = add(sum, apart);
        for (bool composed : {false, true}) {
          const Tensor into = sum.clone(), gw_too = Tensor::empty(c.w, c.dtype);
          if (composed)
            cpu.Backend::conv2d_backward(gy, x, w, Tensor(), win, 1, into, Tensor(), Tensor(),
                                         true);
          else
            cpu.conv2d_backward(gy, x, w, Tensor(), win, 1, into, gw_too, Tensor(), true);
          BOOST_TEST(qkv::testing::equal_values(into, expected), "composed " << composed);
          if (!composed) BOOST_TEST(qkv::testing::equal_values(gw_too, gw));
        }
      }
      seed += 10;
    }
}

BOOST_AUTO_TEST_SUITE_END()
