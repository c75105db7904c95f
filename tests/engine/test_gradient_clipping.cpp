// clip_grad_norm_'s kernels (engine/cpu/gradient_clipping.cpp) against the sums and products
// written out per element: the squares rounded in each tensor's dtype and added in double, and
// each element times the scale rounded to its dtype, bit for bit. Tensors of one element, of one
// range below the 4096-element grain, of ragged ranges and of several, float32 and float64 in one
// list, at one and two threads; a strided tensor in the list goes to Backend's composed default.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "engine/backend.h"
#include "engine/ops.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::ThreadCount;

namespace {

std::vector<Tensor> gradients() {
  std::vector<Tensor> xs;
  for (int64_t n : {1, 300, 4095, 4097, 20007, 70000}) xs.push_back(randn({n}));
  xs.push_back(randn({3, 1000}, {.dtype = DType::f64}));
  return xs;
}

// Each square in the tensor's dtype, added in long double: the reference the kernel's float64
// lanes approach to within their own rounding.
double squares_written_out(const std::vector<Tensor>& xs) {
  long double total = 0;
  for (const Tensor& x : xs) {
    if (x.dtype() == DType::f32)
      for (float v : x.contiguous().to_vector<float>()) total += float(v * v);
    else
      for (double v : x.contiguous().to_vector<double>()) total += v * v;
  }
  return double(total);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradient_clipping)

BOOST_AUTO_TEST_CASE(sum_of_squares_rounds_each_square_in_its_dtype) {
  manual_seed(5);
  Backend& cpu = backend_for(Device::cpu());
  const std::vector<Tensor> xs = gradients();
  const double expected = squares_written_out(xs);
  for (int threads : {1, 2}) {
    ThreadCount scope(threads);
    // Squares taken in float64 instead would be about 1e-10 off over these 100k elements.
    const double got = cpu.sum_of_squares(xs);
    BOOST_TEST(std::abs(got - expected) <= 1e-14 * expected,
               threads << " threads: " << got << " vs " << expected);
  }
  // The composed default rounds each float32 tensor's sum to float32.
  const double composed = cpu.Backend::sum_of_squares(xs);
  BOOST_TEST(std::abs(composed - expected) <= 1e-6 * expected);
  // A strided tensor in the list: the default's value.
  std::vector<Tensor> with_strided = xs;
  with_strided.push_back(transpose(randn({70, 90}), 0, 1));
  const double strided = cpu.sum_of_squares(with_strided);
  BOOST_TEST(std::abs(strided - squares_written_out(with_strided)) <= 1e-6 * strided);
}

BOOST_AUTO_TEST_CASE(scale_multiplies_by_the_scale_rounded_to_the_dtype) {
  manual_seed(6);
  Backend& cpu = backend_for(Device::cpu());
  const double scale = 0.123456789;  // not a float: float32 elements use float(scale)
  for (int threads : {1, 2}) {
    ThreadCount scope(threads);
    std::vector<Tensor> xs = gradients();
    xs.push_back(transpose(randn({70, 90}), 0, 1));  // strided: the default
    std::vector<std::vector<double>> before;
    for (const Tensor& x : xs) before.push_back(x.contiguous().to_vector<double>());
    cpu.scale_(xs, scale);
    int wrong = 0;
    for (size_t t = 0; t < xs.size(); ++t) {
      const std::vector<double> after = xs[t].contiguous().to_vector<double>();
      for (size_t i = 0; i < after.size(); ++i) {
        const double want = xs[t].dtype() == DType::f32 ? double(float(before[t][i]) * float(scale))
                                                        : before[t][i] * scale;
        wrong += after[i] != want;
      }
    }
    BOOST_TEST(wrong == 0, threads << " threads");
  }
}

BOOST_AUTO_TEST_SUITE_END()
