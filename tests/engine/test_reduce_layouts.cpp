// amax / amin / sum over the layouts CBAM reduces: the trailing dims of [B, C, H, W] (inner 1,
// contiguous rows) and the channels (a strided middle axis over contiguous H * W), against loops
// over the values; NaN anywhere in a reduced run makes the result NaN, as PyTorch's amax.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_values;

namespace {

// x [B, C, S] as a flat vector; reduce over C (over_channels) or over S, by plain loops.
std::vector<double> reference(const std::vector<double>& x, int64_t B, int64_t C, int64_t S,
                              bool over_channels, char op) {
  std::vector<double> out;
  auto combine = [op](double a, double v) {
    if (std::isnan(a) || std::isnan(v)) return std::numeric_limits<double>::quiet_NaN();
    return op == '+' ? a + v : op == '>' ? std::max(a, v) : std::min(a, v);
  };
  const int64_t outer = over_channels ? S : C, reduced = over_channels ? C : S;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < outer; ++k) {
      double acc = op == '+' ? 0 : op == '>' ? -INFINITY : INFINITY;
      for (int64_t r = 0; r < reduced; ++r) {
        const int64_t c = over_channels ? r : k, s = over_channels ? k : r;
        acc = combine(acc, x[(b * C + c) * S + s]);
      }
      out.push_back(acc);
    }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(reduce_layouts)

// H * W = 1320 spans two inner blocks of 1024 and a ragged tail; -inf and +inf entries, one NaN.
BOOST_AUTO_TEST_CASE(amax_amin_sum_over_spatial_dims_and_channels) {
  const int64_t B = 3, C = 5, H = 33, W = 40, S = H * W;
  manual_seed(21);
  for (DType dtype : {DType::f32, DType::f64}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      std::vector<double> v = randn({B, C, H, W}, {.dtype = DType::f64}).to_vector<double>();
      v[7] = -INFINITY;                         // b 0, c 0
      v[(1 * C + 2) * S + S - 1] = INFINITY;    // b 1, c 2, the last spatial value
      v[(2 * C + 4) * S + 123] = std::nan("");  // b 2, c 4
      Tensor x = tensor(v, {B, C, H, W}, {.dtype = dtype});
      // float32 rounding of the inputs, then the loops in double
      const std::vector<double> xv = x.to_vector<double>();
      const double tol = dtype == DType::f32 ? 1e-3 : 1e-10;
      for (bool over_channels : {false, true}) {
        BOOST_TEST_CONTEXT((over_channels ? "over channels" : "over H, W")) {
          const std::vector<int> dims =
              over_channels ? std::vector<int>{1} : std::vector<int>{2, 3};
          check_values(amax(x, dims), reference(xv, B, C, S, over_channels, '>'), 0);
          check_values(amin(x, dims), reference(xv, B, C, S, over_channels, '<'), 0);
          check_values(sum(x, dims), reference(xv, B, C, S, over_channels, '+'), tol);
        }
      }
    }
  }
}

// The column sums of a tall matrix (a bias's gradient) are taken as two halves of the rows
// (middle_axis_sum.h, sum_middle_axis): right against the loops with an odd row count,
// and the same bits at 1, 2 and 3 threads.
BOOST_AUTO_TEST_CASE(column_sums_of_a_tall_matrix_are_the_same_at_any_thread_count) {
  qkv::testing::ThreadCount restore;
  manual_seed(22);
  const int64_t shapes[][2] = {{1280, 128}, {2001, 33}, {300, 200}};  // the last one: not tall
  for (DType dtype : {DType::f32, DType::f64})
    for (const auto& shape : shapes) {
      const int64_t rows = shape[0], cols = shape[1];
      BOOST_TEST_CONTEXT(dtype_name(dtype) << " [" << rows << ", " << cols << "]") {
        Tensor x = randn({rows, cols}, {.dtype = dtype});
        const std::vector<double> xv = x.to_vector<double>();
        std::vector<std::vector<double>> results;
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          results.push_back(sum(x, {0}).to_vector<double>());
        }
        check_values(tensor(results[0], {cols}, {.dtype = DType::f64}),
                     reference(xv, 1, rows, cols, /*over_channels=*/true, '+'),
                     dtype == DType::f32 ? 1e-4 : 1e-10);
        BOOST_TEST((results[0] == results[1]), "1 and 2 threads differ");
        BOOST_TEST((results[0] == results[2]), "1 and 3 threads differ");
      }
    }
}

BOOST_AUTO_TEST_SUITE_END()
