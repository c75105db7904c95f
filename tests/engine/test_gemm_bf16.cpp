// The bfloat16 GEMM (engine/cpu/gemm_bf16.h): every kernel this CPU can run (AMX tiles,
// VDPBF16PS), whichever one bf16_kernel() chose (the log names them), against
// a double-precision product of the same bfloat16 values: all four transpose combinations, shapes
// on and past every register tile, AMX tile and cache block edge, odd depths, accumulation, padded
// and zero leading dimensions, broadcast batches, both thread counts, what NaN and infinity do,
// and subnormals; each with bfloat16 operands and with float32 ones (rounded as they are packed:
// the reference rounds them with float_to_bf16). Then the entry point: it runs the chosen kernel.
// Skipped where the CPU has neither kernel.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cpu/amx.h"
#include "engine/cpu/gemm_bf16.h"
#include "engine/cpu/gemm_bf16_kernels.h"
#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/parallel.h"
#include "tests/engine/helpers.h"

using qkv::testing::ThreadCount;

namespace {

using qkv::bf16_t;

using qkv::cpu::Bf16Kernel;

// The kernels this CPU can run, each tested whether or not bf16_kernel() chose it.
std::vector<Bf16Kernel> runnable_kernels() {
  std::vector<Bf16Kernel> kernels;
  if (qkv::cpu::amx_bf16_available()) kernels.push_back(Bf16Kernel::amx_tiles);
  if (qkv::cpu::avx512_bf16_supported()) kernels.push_back(Bf16Kernel::avx512_bf16);
  return kernels;
}

boost::test_tools::assertion_result some_kernel_runs(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result result(!runnable_kernels().empty());
  result.message() << "this CPU or OS offers neither AMX bf16 tiles nor AVX512-BF16";
  for (Bf16Kernel kernel : runnable_kernels())
    BOOST_TEST_MESSAGE("testing the bfloat16 kernel " << qkv::cpu::bf16_kernel_name(kernel));
  BOOST_TEST_MESSAGE("chosen for products: " << qkv::cpu::bf16_kernel_name(qkv::cpu::bf16_kernel())
                                             << " (" << qkv::cpu::bf16_kernel_reason() << ")");
  return result;
}

// gemm_bf16_batched's arguments, on one kernel.
template <typename Source>
void multiply(Bf16Kernel kernel, int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
              const Source* a, int64_t lda, int64_t stride_a, const Source* b, int64_t ldb,
              int64_t stride_b, bool accumulate, float* c, int64_t ldc, int64_t stride_c) {
  using Bits = std::conditional_t<std::is_same_v<Source, bf16_t>, uint16_t, float>;
  const auto* a_bits = reinterpret_cast<const Bits*>(a);
  const auto* b_bits = reinterpret_cast<const Bits*>(b);
  if (kernel == Bf16Kernel::amx_tiles)
    qkv::cpu::gemm_bf16_batched_amx(batch, ta, tb, m, n, k, a_bits, lda, stride_a, b_bits, ldb,
                                    stride_b, accumulate, c, ldc, stride_c);
  else
    qkv::cpu::gemm_bf16_batched_avx512(batch, ta, tb, m, n, k, a_bits, lda, stride_a, b_bits, ldb,
                                       stride_b, accumulate, c, ldc, stride_c);
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
double relative_error(Bf16Kernel kernel, const Case& c, std::mt19937& rng) {
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

  multiply(kernel, c.batch, c.ta, c.tb, c.m, c.n, c.k, a.data(), lda, stride_a, b.data(), ldb,
           stride_b, c.accumulate, out.data(), ldc, stride_c);

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

// Shapes around the kernels' 32 x 32 block and 32-deep step, the VDPBF16PS kernel's 12-row
// register tiles (12, 13, 24, 25 rows) and depth pairs (odd depths), and past the cache blocks
// (kMc = 256 rows, kKc = 256 deep, kNc = 1024 columns).
std::vector<Case> edge_cases() {
  const int64_t shapes[][3] = {
      {1, 1, 1},      {1, 37, 19},     {37, 1, 19},   {16, 16, 32},  {32, 32, 32},  {33, 31, 33},
      {31, 33, 63},   {13, 17, 1},     {2, 3, 300},   {64, 96, 512}, {70, 40, 257}, {257, 33, 40},
      {40, 1030, 70}, {300, 45, 1100}, {12, 32, 3},   {13, 16, 255}, {24, 33, 31},  {25, 64, 513},
      {36, 47, 5},    {5, 15, 2},      {268, 40, 259}};
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& s : shapes) cases.push_back({ta, tb, s[0], s[1], s[2]});
  return cases;
}

void check(const std::vector<Case>& cases) {
  for (Bf16Kernel kernel : runnable_kernels()) {
    std::mt19937 rng(5);
    const char* name = qkv::cpu::bf16_kernel_name(kernel);
    for (const Case& c : cases) {
      const double err = relative_error<bf16_t>(kernel, c, rng);
      BOOST_TEST(err <= 1.0, name << ": " << describe(c) << ", bfloat16 operands: error " << err);
      const double err_rounded = relative_error<float>(kernel, c, rng);
      BOOST_TEST(err_rounded <= 1.0,
                 name << ": " << describe(c) << ", float32 operands: error " << err_rounded);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gemm_bf16, *boost::unit_test::precondition(some_kernel_runs))

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
  for (Bf16Kernel kernel : runnable_kernels()) {
    std::vector<float> c(size_t(m * n));
    multiply(kernel, 1, false, false, m, n, k, a.data(), 0, 0, b.data(), n, 0, false, c.data(), n,
             0);
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < k; ++p)
        want += double(qkv::bf16_to_float(a[size_t(p)])) * qkv::bf16_to_float(b[size_t(p * n + j)]);
      for (int64_t i = 0; i < m; ++i) BOOST_TEST(std::abs(c[size_t(i * n + j)] - want) <= 1e-4);
    }
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
        for (Bf16Kernel kernel : runnable_kernels())
          for (bool rounded_while_packed : {false, true}) {
            std::vector<float> c(size_t(m * n));
            if (rounded_while_packed)
              multiply(kernel, 1, ta, tb, m, n, k, a.data(), ta ? m : k, 0, b.data(), tb ? k : n, 0,
                       false, c.data(), n, 0);
            else
              multiply(kernel, 1, ta, tb, m, n, k, a16.data(), ta ? m : k, 0, b16.data(),
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
            BOOST_TEST(wrong == 0, qkv::cpu::bf16_kernel_name(kernel)
                                       << ": m=" << m << " " << (ta ? "T" : "N") << (tb ? "T" : "N")
                                       << (rounded_while_packed ? " float32" : " bfloat16") << ": "
                                       << wrong << " outputs wrong");
          }
      }
}

// Both instructions read bfloat16 subnormals as zero and flush subnormal float32 results to zero,
// whatever MXCSR says (the Intel SDM specifies TDPBF16PS and VDPBF16PS so). A subnormal times 2^100
// would be a normal 2^-33 and more; two products of 2^-70 would make 2^-139, a float32 subnormal.
// Beside them, a normal product shows the output is not simply zero.
BOOST_AUTO_TEST_CASE(subnormals_read_and_come_out_as_zero) {
  const int64_t m = 8, n = 8, k = 2;
  const bf16_t subnormal{uint16_t(0x0001)};  // 2^-133, the smallest
  for (Bf16Kernel kernel : runnable_kernels()) {
    std::vector<bf16_t> a(size_t(m * k), qkv::float_to_bf16(0)), b(size_t(k * n));
    for (bf16_t& x : b) x = qkv::float_to_bf16(std::ldexp(1.0f, 100));
    a[0] = subnormal;                                         // row 0: subnormal input
    a[2] = a[3] = qkv::float_to_bf16(std::ldexp(1.0f, -70));  // row 1: subnormal result ...
    for (int64_t j = 0; j < n; ++j)  // ... of columns < 4 (B = 2^-70 there)
      if (j < 4) b[size_t(j)] = b[size_t(n + j)] = qkv::float_to_bf16(std::ldexp(1.0f, -70));
    a[4] = qkv::float_to_bf16(1.0f);  // row 2: B's first row, ordinary products
    std::vector<float> c(size_t(m * n), 1.0f);
    multiply(kernel, 1, false, false, m, n, k, a.data(), k, 0, b.data(), n, 0, false, c.data(), n,
             0);
    const char* name = qkv::cpu::bf16_kernel_name(kernel);
    for (int64_t j = 0; j < n; ++j) BOOST_TEST(c[size_t(j)] == 0.0f, name << " column " << j);
    for (int64_t j = 0; j < 4; ++j) BOOST_TEST(c[size_t(n + j)] == 0.0f, name << " column " << j);
    for (int64_t j = 0; j < n; ++j)
      BOOST_TEST(c[size_t(2 * n + j)] == qkv::bf16_to_float(b[size_t(j)]), name << " column " << j);
  }
}

// gemm_bf16_batched runs the kernel bf16_kernel() chose, to the bit; with none chosen it refuses
// with the reason.
BOOST_AUTO_TEST_CASE(the_entry_point_runs_the_chosen_kernel) {
  std::mt19937 rng(21);
  const int64_t m = 37, n = 45, k = 51;
  std::vector<bf16_t> a = random_bf16(size_t(m * k), rng), b = random_bf16(size_t(k * n), rng);
  std::vector<float> c(size_t(m * n)), want(c.size());
  const Bf16Kernel chosen = qkv::cpu::bf16_kernel();
  if (chosen == Bf16Kernel::none) {
    BOOST_CHECK_EXCEPTION(qkv::cpu::gemm_bf16_batched(1, false, false, m, n, k, a.data(), k, 0,
                                                      b.data(), n, 0, false, c.data(), n, 0),
                          qkv::Error, [](const qkv::Error& e) {
                            return std::string(e.what()).find(qkv::cpu::bf16_kernel_reason()) !=
                                   std::string::npos;
                          });
    return;
  }
  qkv::cpu::gemm_bf16_batched(1, false, true, m, n, k, a.data(), k, 0, b.data(), k, 0, false,
                              c.data(), n, 0);
  multiply(chosen, 1, false, true, m, n, k, a.data(), k, 0, b.data(), k, 0, false, want.data(), n,
           0);
  BOOST_TEST(c == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
