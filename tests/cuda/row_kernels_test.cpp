// Softmax / log_softmax and layer_norm (forward and backward) on the GPU against the CPU.
#include <limits>

#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

namespace {

// Random rows, with row 1 partly -inf and row 2 entirely -inf (a fully masked attention row).
Tensor rows_with_masks(int64_t rows, int64_t cols, DType t, uint64_t seed) {
  std::vector<double> v = random_tensor({rows, cols}, DType::f64, -6, 6, seed).to_vector<double>();
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < cols; c += 2) v[cols + c] = -inf;
  for (int64_t c = 0; c < cols; ++c) v[2 * cols + c] = -inf;
  return tensor(v, {rows, cols}, TensorOptions{.dtype = t});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(row_kernels)

BOOST_AUTO_TEST_CASE(softmax_and_log_softmax_forward_and_backward,
                     *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t cols : {1, 7, 64, 1000, 5000}) {
      Tensor x = rows_with_masks(5, cols, t, 91);
      Tensor gy = random_tensor({5, cols}, t, -1, 1, 92);
      for (bool log : {false, true}) {
        const std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(t) +
                                 " cols=" + std::to_string(cols);
        Tensor want = Tensor::empty(x.shape(), t),
               got = Tensor::empty(x.shape(), t, Device::cuda());
        host().softmax(x, want, log);
        gpu().softmax(on_gpu(x), got, log);
        check_close(got, want, 8 * tolerance(t), what);
        // backward from the CPU's forward output on both sides, so only the backward is compared
        Tensor gwant = Tensor::empty(x.shape(), t),
               ggot = Tensor::empty(x.shape(), t, Device::cuda());
        host().softmax_backward(gy, want, gwant, log);
        gpu().softmax_backward(on_gpu(gy), on_gpu(want), ggot, log);
        check_close(ggot, gwant, 8 * tolerance(t), what + " backward");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(layer_norm_forward_and_backward, *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t rows : {1, 37, 300}) {
      for (int64_t cols : {1, 48, 777}) {
        for (bool affine : {false, true}) {
          const std::string what = std::string("layer_norm ") + dtype_name(t) + " " +
                                   std::to_string(rows) + "x" + std::to_string(cols) +
                                   (affine ? " affine" : "");
          // an offset mean makes the two-pass statistics matter
          Tensor x = random_tensor({rows, cols}, t, 99, 101, 93);
          Tensor w = affine ? random_tensor({cols}, t, 0.5, 1.5, 94) : Tensor();
          Tensor b = affine ? random_tensor({cols}, t, -1, 1, 95) : Tensor();
          Tensor gy = random_tensor({rows, cols}, t, -1, 1, 96);
          Tensor y = Tensor::empty({rows, cols}, t), mean = Tensor::empty({rows}, t),
                 rstd = Tensor::empty({rows}, t);
          host().layer_norm(x, w, b, 1e-5, y, mean, rstd);
          Tensor yg = Tensor::empty({rows, cols}, t, Device::cuda());
          Tensor mg = Tensor::empty({rows}, t, Device::cuda()),
                 rg = Tensor::empty({rows}, t, Device::cuda());
          gpu().layer_norm(on_gpu(x), affine ? on_gpu(w) : Tensor(), affine ? on_gpu(b) : Tensor(),
                           1e-5, yg, mg, rg);
          // Both devices take the statistics in double, in different orders; over values near
          // 100 with a spread near 0.6 that rounding is amplified ~170x in x - mean, which for
          // float64 outweighs the dtype's own tolerance (measured up to 3.9e-12 in y).
          const double stats = 1e-10;
          check_close(yg, y, std::max(8 * tolerance(t), stats), what);
          check_close(mg, mean, tolerance(t), what + " mean");
          check_close(rg, rstd, std::max(8 * tolerance(t), stats), what + " rstd");

          Tensor gx = Tensor::empty({rows, cols}, t), gw = Tensor::empty({cols}, t),
                 gb = Tensor::empty({cols}, t);
          host().layer_norm_backward(gy, x, w, mean, rstd, gx, affine ? gw : Tensor(),
                                     affine ? gb : Tensor());
          Tensor gxg = Tensor::empty({rows, cols}, t, Device::cuda());
          Tensor gwg = Tensor::empty({cols}, t, Device::cuda()),
                 gbg = Tensor::empty({cols}, t, Device::cuda());
          gpu().layer_norm_backward(on_gpu(gy), on_gpu(x), affine ? on_gpu(w) : Tensor(),
                                    on_gpu(mean), on_gpu(rstd), gxg, affine ? gwg : Tensor(),
                                    affine ? gbg : Tensor());
          // gx subtracts two row means from gh: cancellation costs a few more bits
          check_close(gxg, gx, std::max(64 * tolerance(t), stats), what + " gx");
          if (affine) {
            check_close(gwg, gw, 16 * tolerance(t), what + " gweight");
            check_close(gbg, gb, 16 * tolerance(t), what + " gbias");
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
