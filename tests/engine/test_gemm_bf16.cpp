// The bfloat16 GEMM (engine/cpu/gemm_bf16.h), on whichever kernel this CPU has (AMX tiles or
// AVX512-BF16; the log names it, and CTest runs the suite once more with AMX ruled out), against
// a double-precision product of the same bfloat16 values: all four transpose combinations, shapes
// on and past every register tile, AMX tile and cache block edge, odd depths, accumulation, padded
// and zero leading dimensions, broadcast batches, both thread counts, what NaN and infinity do,
// and subnormals; each with bfloat16 operands and with float32 ones (rounded as they are packed:
// the reference rounds them with float_to_bf16). Skipped where the CPU has neither kernel.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cpu/gemm_bf16.h"
#include "engine/dtype.h"
#include "engine/parallel.h"

namespace {

using qkv::bf16_t;

boost::test_tools::assertion_result kernel_available(boost::unit_test::test_unit_id) {
  const qkv::cpu::Bf16Kernel kernel = qkv::cpu::bf16_kernel();
  boost::test_tools::assertion_result result(kernel != qkv::cpu::Bf16Kernel::none);
  result.message() << "no bfloat16 kernel on this CPU or OS (neither AMX tiles nor AVX512-BF16, or "
                      "both ruled out by QKV_CPU_AMX=0 / QKV_CPU_AVX512_BF16=0)";
  if (kernel != qkv::cpu::Bf16Kernel::none)
    BOOST_TEST_MESSAGE("bfloat16 GEMM kernel: " << qkv::cpu::bf16_kernel_name(kernel));
  return result;
}

struct Case {
  bool ta, tb;
  int64_t m, n, k;
  bool accumulate = false;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;
  int64_t batch = 1;
  bool broadcast_b = false;  // stride_b = 0: one B for the whole batch
};

std::string describe(const Case& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " m=" + std::to_string(c.m) +
         " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " batch=" + std::to_string(c.batch) + (c.accumulate ? " accumulate" : "") +
         (c.broadcast_b ? " broadcast B" : "");
}

std::vector<bf16_t> random_bf16(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<bf16_t> v(count);
  for (bf16_t& x : v) x = qkv::float_to_bf16(u(rng));
  return v;
}

// Random operand values of type Source (bf16_t or float, the latter not bfloat16-exact), and the
// bfloat16 value the product must use for each.
template <typename Source>
std::vector<Source> random_values(size_t count, std::mt19937& rng) {
  if constexpr (std::is_same_v<Source, bf16_t>) {
    return random_bf16(count, rng);
  } else {
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v(count);
    for (float& x : v) x = u(rng);
    return v;
  }
}
double as_bf16(bf16_t x) { return qkv::bf16_to_float(x); }
double as_bf16(float x) { return qkv::bf16_to_float(qkv::float_to_bf16(x)); }

// Runs case c and returns the largest error over its allowance, eps_f32 * (k + 2) * (sum of
// |terms|): float32 sums of k exact products meet it, a wrong index or a lost term does not.
// Padding between rows of C must come back as it was.
template <typename Source>
double relative_error(const Case& c, std::mt19937& rng) {
  const int64_t lda = (c.ta ? c.m : c.k) + c.pad_a, ldb = (c.tb ? c.k : c.n) + c.pad_b;
  const int64_t ldc = c.n + c.pad_c;
  const int64_t a_rows = c.ta ? c.k : c.m, b_rows = c.tb ? c.n : c.k;
  const int64_t stride_a = a_rows * lda, stride_b = c.broadcast_b ? 0 : b_rows * ldb;
  const int64_t stride_c = c.m * ldc;
  std::vector<Source> a = random_values<Source>(size_t(stride_a * c.batch), rng);
  std::vector<Source> b =
      random_values<Source>(size_t(b_rows * ldb * (c.broadcast_b ? 1 : c.batch)), rng);
  std::vector<float> out(size_t(stride_c * c.batch));
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : out) v = u(rng);
  if (!c.accumulate)  // C is only written then: NaN there must not leak into the result
    for (int64_t i = 0; i < int64_t(out.size()); ++i)
      if (i % ldc < c.n) out[size_t(i)] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> before = out;

  qkv::cpu::gemm_bf16_batched(c.batch, c.ta, c.tb, c.m, c.n, c.k, a.data(), lda, stride_a, b.data(),
                              ldb, stride_b, c.accumulate, out.data(), ldc, stride_c);

  auto at = [](const std::vector<Source>& x, int64_t offset, bool trans, int64_t ld, int64_t r,
               int64_t col) {
    return as_bf16(x[size_t(offset + (trans ? col * ld + r : r * ld + col))]);
  };
  const double eps = std::numeric_limits<float>::epsilon();
  double worst = 0;
  for (int64_t item = 0; item < c.batch; ++item)
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const double term =
              at(a, item * stride_a, c.ta, lda, i, p) * at(b, item * stride_b, c.tb, ldb, p, j);
          sum += term;
          magnitude += std::abs(term);
        }
        const size_t index = size_t(item * stride_c + i * ldc + j);
        const double prior = c.accumulate ? before[index] : 0;
        const double allowed = eps * double(c.k + 2) * (magnitude + std::abs(prior)) + 1e-30;
        const double err = std::abs(double(out[index]) - (sum + prior)) / allowed;
        worst = std::max(worst, std::isnan(err) ? 1e30 : err);
      }
      for (int64_t j = c.n; j < ldc; ++j) {
        const size_t index = size_t(item * stride_c + i * ldc + j);
        if (out[index] != before[index]) worst = 1e30;
      }
    }
  return worst;
}

// Shapes around the kernel's 32 x 32 block and 32-deep step, and past its cache blocks
// (kMc = 256 rows, kKc = 256 deep, kNc = 1024 columns).
std::vector<Case> edge_cases() {
  const int64_t shapes[][3] = {{1, 1, 1},      {1, 37, 19},    {37, 1, 19},   {16, 16, 32},
                               {32, 32, 32},   {33, 31, 33},   {31, 33, 63},  {13, 17, 1},
                               {2, 3, 300},    {64, 96, 512},  {70, 40, 257}, {257, 33, 40},
                               {40, 1030, 70}, {300, 45, 1100}};
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& s : shapes) cases.push_back({ta, tb, s[0], s[1], s[2]});
  return cases;
}

void check(const std::vector<Case>& cases) {
  std::mt19937 rng(5);
  for (const Case& c : cases) {
    const double err = relative_error<bf16_t>(c, rng);
    BOOST_TEST(err <= 1.0, describe(c) << ", bfloat16 operands: error " << err);
    const double err_rounded = relative_error<float>(c, rng);
    BOOST_TEST(err_rounded <= 1.0, describe(c) << ", float32 operands: error " << err_rounded);
  }
}

// Restores the thread count a test changed.
struct ThreadCount {
  int saved = qkv::num_threads();
  ~ThreadCount() { qkv::set_num_threads(saved); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(gemm_bf16, *boost::unit_test::precondition(kernel_available))

BOOST_AUTO_TEST_CASE(matches_the_double_product_on_edge_shapes) {
  ThreadCount restore;
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    check(edge_cases());
  }
}

BOOST_AUTO_TEST_CASE(accumulates_and_respects_leading_dimensions) {
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({ta, tb, 29, 41, 23, true});
      cases.push_back({ta, tb, 29, 41, 23, false, 3, 5, 7});
      cases.push_back({ta, tb, 45, 70, 600, true, 1, 2, 3});  // accumulate across depth blocks
      cases.push_back({ta, tb, 5, 6, 0, true});               // k = 0 leaves C alone ...
      cases.push_back({ta, tb, 5, 6, 0, false, 0, 0, 2});     // ... or zeroes it
      // attention-sized products: edge blocks only, 20 of 32 columns (past 16: both halves of a
      // row) and 9, with padding after each row of C that must stay untouched
      for (bool accumulate : {false, true}) {
        cases.push_back({ta, tb, 20, 20, 32, accumulate, 1, 2, 3, 4});
        cases.push_back({ta, tb, 20, 9, 20, accumulate, 0, 0, 1, 4});
      }
    }
  check(cases);
}

BOOST_AUTO_TEST_CASE(batches_and_broadcast_operands) {
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({ta, tb, 20, 24, 16, false, 0, 0, 0, 8});
      cases.push_back({ta, tb, 33, 17, 40, true, 0, 0, 0, 3, true});
      cases.push_back({ta, tb, 128, 64, 128, false, 0, 0, 0, 4});
    }
  ThreadCount restore;
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    check(cases);
  }
}

// m <= 4 rows take the path that reads B in place (gemm_bf16_small_m.h): every row count, column
// counts around its 4-column and 64-column blocks, odd and even depths around the 32-value chunk,
// accumulation, padded leading dimensions, and products large enough to be split between threads.
BOOST_AUTO_TEST_CASE(few_rows_read_b_in_place) {
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      for (int64_t m : {1, 2, 3, 4})
        for (int64_t n : {1, 3, 4, 5, 17, 64, 65, 130})
          for (int64_t k : {1, 2, 31, 33, 70}) cases.push_back({ta, tb, m, n, k});
      cases.push_back({ta, tb, 3, 37, 33, true, 3, 5, 7});
      cases.push_back({ta, tb, 2, 2048, 512});  // over the threading threshold
      cases.push_back({ta, tb, 4, 700, 1000, true});
    }
  ThreadCount restore;
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    check(cases);
  }
}

// A leading dimension of 0 repeats one stored row: every row of op(A) (or column of op(B)) is the
// same, so every row (column) of C must be the same.
BOOST_AUTO_TEST_CASE(zero_leading_dimension_repeats_a_row) {
  std::mt19937 rng(9);
  const int64_t m = 40, n = 36, k = 50;
  std::vector<bf16_t> a = random_bf16(k, rng), b = random_bf16(size_t(k * n), rng);
  std::vector<float> c(size_t(m * n));
  qkv::cpu::gemm_bf16_batched(1, false, false, m, n, k, a.data(), 0, 0, b.data(), n, 0, false,
                              c.data(), n, 0);
  for (int64_t j = 0; j < n; ++j) {
    double want = 0;
    for (int64_t p = 0; p < k; ++p)
      want += double(qkv::bf16_to_float(a[size_t(p)])) * qkv::bf16_to_float(b[size_t(p * n + j)]);
    for (int64_t i = 0; i < m; ++i) BOOST_TEST(std::abs(c[size_t(i * n + j)] - want) <= 1e-4);
  }
}

// NaN and infinity in an operand reach exactly the outputs that use them, in every layout. The
// depth is odd and the infinities sit at its last value, next to the zero padding of the last
// depth pair: a pack that let a real value into the padding would meet the other operand's
// zero there and turn an infinity into NaN.
BOOST_AUTO_TEST_CASE(nan_and_infinity_reach_exactly_their_outputs) {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t n = 34, k = 39;
  for (int64_t m : {35, 3})  // the tile path and the few-rows path
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        std::mt19937 rng(13);
        std::vector<float> a = random_values<float>(size_t(m * k), rng);
        std::vector<float> b = random_values<float>(size_t(k * n), rng);
        auto a_at = [&](int64_t i, int64_t p) -> float& {
          return a[size_t(ta ? p * m + i : i * k + p)];
        };
        auto b_at = [&](int64_t p, int64_t j) -> float& {
          return b[size_t(tb ? j * k + p : p * n + j)];
        };
        // Positive ones at the last depth keep every product with an infinity positive.
        for (int64_t i = 0; i < m; ++i) a_at(i, k - 1) = i == 2 ? inf : 1.0f;
        for (int64_t j = 0; j < n; ++j) b_at(k - 1, j) = j == 5 ? inf : 1.0f;
        a_at(1, 7) = std::numeric_limits<float>::quiet_NaN();
        std::vector<bf16_t> a16(a.size()), b16(b.size());
        for (size_t i = 0; i < a.size(); ++i) a16[i] = qkv::float_to_bf16(a[i]);
        for (size_t i = 0; i < b.size(); ++i) b16[i] = qkv::float_to_bf16(b[i]);
        for (bool rounded_while_packed : {false, true}) {
          std::vector<float> c(size_t(m * n));
          if (rounded_while_packed)
            qkv::cpu::gemm_bf16_batched(1, ta, tb, m, n, k, a.data(), ta ? m : k, 0, b.data(),
                                        tb ? k : n, 0, false, c.data(), n, 0);
          else
            qkv::cpu::gemm_bf16_batched(1, ta, tb, m, n, k, a16.data(), ta ? m : k, 0, b16.data(),
                                        tb ? k : n, 0, false, c.data(), n, 0);
          int64_t wrong = 0;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              const float v = c[size_t(i * n + j)];
              if (i == 1)
                wrong += !std::isnan(v);
              else if (i == 2 || j == 5)
                wrong += !(std::isinf(v) && v > 0);
              else
                wrong += !std::isfinite(v);
            }
          BOOST_TEST(wrong == 0, "m=" << m << " " << (ta ? "T" : "N") << (tb ? "T" : "N")
                                      << (rounded_while_packed ? " float32" : " bfloat16") << ": "
                                      << wrong << " outputs wrong");
        }
      }
}

BOOST_AUTO_TEST_SUITE_END()
