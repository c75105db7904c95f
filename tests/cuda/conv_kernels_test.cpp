// im2col / col2im on the GPU against the CPU backend: padding, stride, dilation, both dtypes, and
// col2im accumulating into an existing gradient. Then conv2d and the poolings end to end.
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

BOOST_AUTO_TEST_SUITE(conv_kernels)

BOOST_AUTO_TEST_CASE(im2col_and_col2im_match_the_cpu, *utf::precondition(gpu_present)) {
  const std::vector<Window2d> windows = {
      {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1},
      {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 3, .pad_h = 0, .pad_w = 2},
      {.kernel_h = 2,
       .kernel_w = 3,
       .stride_h = 1,
       .stride_w = 2,
       .pad_h = 2,
       .pad_w = 1,
       .dilation_h = 2,
       .dilation_w = 2},
  };
  const int64_t N = 2, C = 3, H = 9, W = 8;
  for (const Window2d& w : windows) {
    const int64_t rows = C * w.kernel_h * w.kernel_w, L = w.out_h(H) * w.out_w(W);
    for (DType t : {DType::f32, DType::f64}) {
      Tensor x = random_tensor({N, C, H, W}, t, -1, 1, 201);
      Tensor want = Tensor::empty({N, rows, L}, t);
      Tensor got = Tensor::empty({N, rows, L}, t, Device::cuda());
      host().im2col(x, w, want, -7.0);  // a distinctive pad value: padding lands where it should
      gpu().im2col(on_gpu(x), w, got, -7.0);
      check_equal(got, want, std::string("im2col ") + dtype_name(t));

      Tensor cols = random_tensor({N, rows, L}, t, -1, 1, 202);
      Tensor base = random_tensor({N, C, H, W}, t, -1, 1, 203);
      Tensor want_x = base.clone(), got_x = on_gpu(base);
      host().col2im(cols, w, want_x);
      gpu().col2im(on_gpu(cols), w, got_x);
      check_close(got_x, want_x, 8 * tolerance(t), std::string("col2im ") + dtype_name(t));
    }
  }
}

BOOST_AUTO_TEST_CASE(conv_and_pooling_ops_match_the_cpu, *utf::precondition(gpu_present)) {
  Tensor x = random_tensor({2, 4, 10, 9}, DType::f32, -1, 1, 211);
  Tensor w = random_tensor({6, 2, 3, 3}, DType::f32, -1, 1, 212);
  Tensor b = random_tensor({6}, DType::f32, -1, 1, 213);
  check_close(conv2d(on_gpu(x), on_gpu(w), on_gpu(b), 2, 1, 2), conv2d(x, w, b, 2, 1, 2), 1e-5,
              "conv2d");
  check_close(max_pool2d(on_gpu(x), 3, 2, 1), max_pool2d(x, 3, 2, 1), 0, "max_pool2d");
  check_close(avg_pool2d(on_gpu(x), 2), avg_pool2d(x, 2), 1e-6, "avg_pool2d");
}

BOOST_AUTO_TEST_SUITE_END()
