// Reductions over [outer, reduced, inner] on the GPU against the CPU, including NaN and ties.
#include <cmath>
#include <limits>

#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

namespace {

void compare_reduce(ReduceOp op, const Tensor& x, const std::string& what) {
  const bool index = op == ReduceOp::argmax || op == ReduceOp::argmin;
  const Shape out_shape{x.size(0), x.size(2)};
  const DType out_type = index ? DType::i64 : x.dtype();
  Tensor want = Tensor::empty(out_shape, out_type);
  Tensor got = Tensor::empty(out_shape, out_type, Device::cuda());
  host().reduce(op, x, want);
  gpu().reduce(op, on_gpu(x), got);
  // sums accumulate in double on both sides, in a different order: float32 results may differ
  // in the last bit of the final rounding
  const double tol = op == ReduceOp::sum ? tolerance(x.dtype()) : 0.0;
  check_close(got, want, tol, what);
}

const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::argmax,
                         ReduceOp::argmin};

}  // namespace

BOOST_AUTO_TEST_SUITE(reduce)

BOOST_AUTO_TEST_CASE(every_reduction_in_both_layouts, *utf::precondition(gpu_present)) {
  // inner == 1 (contiguous rows, block-per-row kernel) and inner > 1 (column kernel), with a
  // reduced length above and below the block size
  const Shape shapes[] = {{7, 5, 1}, {3, 3000, 1}, {4, 6, 9}, {2, 700, 33}, {1, 1, 1}};
  for (DType t : {DType::f32, DType::f64, DType::i64}) {
    for (const Shape& s : shapes) {
      Tensor x = random_tensor(s, t, -100, 100, 61);
      for (ReduceOp op : kOps)
        compare_reduce(op, x,
                       "op " + std::to_string(int(op)) + " " + dtype_name(t) + " " + shape_str(s));
    }
  }
}

BOOST_AUTO_TEST_CASE(sum_of_bool_counts_true_values, *utf::precondition(gpu_present)) {
  compare_reduce(ReduceOp::sum, random_tensor({3, 50, 1}, DType::b8, 0, 1, 62), "sum of bool");
}

BOOST_AUTO_TEST_CASE(ties_pick_the_first_index_and_nan_wins, *utf::precondition(gpu_present)) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // row 0: ties at 1 and 3; row 1: a NaN at 2 and 5; row 2: all equal
  std::vector<double> v(3 * 600, 0.0);
  v[1] = v[3] = 9;
  v[600 + 2] = v[600 + 5] = nan;
  v[600 + 7] = 50;
  for (int i = 0; i < 600; ++i) v[1200 + i] = 4;
  for (DType t : {DType::f32, DType::f64}) {
    Tensor x = tensor(v, {3, 600, 1}, TensorOptions{.dtype = t});
    for (ReduceOp op : kOps)
      compare_reduce(op, x, "rows with ties and NaN, op " + std::to_string(int(op)));
    Tensor xt = tensor(v, {1, 600, 3}, TensorOptions{.dtype = t});  // inner > 1 kernel
    for (ReduceOp op : kOps)
      compare_reduce(op, xt, "columns with ties and NaN, op " + std::to_string(int(op)));
  }
}

// amax's gradient (Backend::extreme_backward), mul's broadcast factor's (product_sum) and both of
// mul's operands' (mul_gradients), mean_amax and its gradient, CBAM's mean_amax_scaled, mul3 and
// mul3_add_relu and theirs: the GPU's composed defaults against the CPU's one-pass kernels, with
// ties, a NaN run and infinities.
BOOST_AUTO_TEST_CASE(reduction_gradients_in_both_layouts, *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64})
    for (const Shape& s : {Shape{7, 33, 1}, Shape{3, 5, 300}}) {
      const std::string what = std::string(dtype_name(t)) + " " + shape_str(s);
      std::vector<double> v = values_of(random_tensor(s, DType::f64, -3, 3, 63));
      for (double& e : v) e = std::floor(e);  // ties
      v[1] = -std::numeric_limits<double>::infinity();
      v[v.size() / 2] = std::numeric_limits<double>::infinity();
      v[v.size() - 2] = std::numeric_limits<double>::quiet_NaN();
      Tensor x = tensor(v, s, TensorOptions{.dtype = t});
      Tensor kept = Tensor::empty({s[0], s[2]}, t);
      host().reduce(ReduceOp::max, x, kept);
      Tensor gy = random_tensor({s[0], s[2]}, t, -1, 1, 64);
      Tensor want = Tensor::empty(s, t), got = Tensor::empty(s, t, Device::cuda());
      host().extreme_backward(x, kept, gy, want);
      gpu().extreme_backward(on_gpu(x), on_gpu(kept), on_gpu(gy), got);
      check_close(got, want, 0.0, "extreme_backward " + what);
      Tensor b = random_tensor(s, t, -1, 1, 65), a = random_tensor(s, t, -1, 1, 66);
      Tensor sums = Tensor::empty({s[0], s[2]}, t),
             sums_gpu = Tensor::empty({s[0], s[2]}, t, Device::cuda());
      host().product_sum(a, b, sums);
      gpu().product_sum(on_gpu(a), on_gpu(b), sums_gpu);
      check_close(sums_gpu, sums, tolerance(t), "product_sum " + what);
      Tensor factor = random_tensor({s[0], s[2]}, t, -1, 1, 67);
      Tensor g_full = Tensor::empty(s, t), g_full_gpu = Tensor::empty(s, t, Device::cuda());
      host().mul_gradients(a, b, factor, g_full, sums);
      gpu().mul_gradients(on_gpu(a), on_gpu(b), on_gpu(factor), g_full_gpu, sums_gpu);
      check_close(g_full_gpu, g_full, tolerance(t), "mul_gradients' full " + what);
      check_close(sums_gpu, sums, tolerance(t), "mul_gradients' factor " + what);
      Tensor pair = Tensor::empty({s[0], 2, s[2]}, t),
             pair_gpu = Tensor::empty({s[0], 2, s[2]}, t, Device::cuda());
      host().mean_amax(x, pair);
      gpu().mean_amax(on_gpu(x), pair_gpu);
      check_close(pair_gpu, pair, tolerance(t), "mean_amax " + what);
      Tensor gy_pair = random_tensor({s[0], 2, s[2]}, t, -1, 1, 68);
      host().mean_amax_backward(x, pair, gy_pair, want);
      gpu().mean_amax_backward(on_gpu(x), on_gpu(pair), on_gpu(gy_pair), got);
      check_close(got, want, tolerance(t), "mean_amax_backward " + what);
      // CBAM's passes with a factor per run and one per position (the CPU's cbam_kernels.cpp)
      Tensor scale = random_tensor({s[0], s[1]}, t, -2, 2, 69);
      Tensor spatial = random_tensor({s[0], s[2]}, t, 0, 1, 70);
      host().mean_amax_scaled(x, scale, pair);
      gpu().mean_amax_scaled(on_gpu(x), on_gpu(scale), pair_gpu);
      check_close(pair_gpu, pair, tolerance(t), "mean_amax_scaled " + what);
      Tensor g_scale = Tensor::empty({s[0], s[1]}, t),
             g_scale_gpu = Tensor::empty({s[0], s[1]}, t, Device::cuda());
      host().mean_amax_scaled_backward(x, scale, pair, gy_pair, want, g_scale);
      gpu().mean_amax_scaled_backward(on_gpu(x), on_gpu(scale), on_gpu(pair), on_gpu(gy_pair), got,
                                      g_scale_gpu);
      check_close(got, want, tolerance(t), "mean_amax_scaled_backward's x " + what);
      check_close(g_scale_gpu, g_scale, tolerance(t), "mean_amax_scaled_backward's scale " + what);
      host().mul3(x, scale, spatial, want);
      gpu().mul3(on_gpu(x), on_gpu(scale), on_gpu(spatial), got);
      check_close(got, want, tolerance(t), "mul3 " + what);
      Tensor residual = random_tensor(s, t, -1, 1, 72);  // mixed signs: some sums clip
      host().mul3_add_relu(residual, x, scale, spatial, want);
      gpu().mul3_add_relu(on_gpu(residual), on_gpu(x), on_gpu(scale), on_gpu(spatial), got);
      check_close(got, want, tolerance(t), "mul3_add_relu " + what);
      Tensor gy_full = random_tensor(s, t, -1, 1, 71);
      Tensor g_spatial = Tensor::empty({s[0], s[2]}, t),
             g_spatial_gpu = Tensor::empty({s[0], s[2]}, t, Device::cuda());
      host().mul3_backward(gy_full, x, scale, spatial, want, g_scale, g_spatial);
      gpu().mul3_backward(on_gpu(gy_full), on_gpu(x), on_gpu(scale), on_gpu(spatial), got,
                          g_scale_gpu, g_spatial_gpu);
      check_close(got, want, tolerance(t), "mul3_backward's x " + what);
      check_close(g_scale_gpu, g_scale, tolerance(t), "mul3_backward's scale " + what);
      check_close(g_spatial_gpu, g_spatial, tolerance(t), "mul3_backward's spatial " + what);
    }
}

BOOST_AUTO_TEST_SUITE_END()
