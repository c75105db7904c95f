// GEMM against a naive double-precision product: every microkernel this CPU can run, all four
// transpose combinations, ragged and degenerate shapes, alpha/beta, padded, broadcast (0) and
// irrelevant leading dimensions, batches, and thread counts.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_kernel.h"
#include "engine/cpu/gemm_packed.h"
#include "engine/parallel.h"
#include "tests/engine/helpers.h"

using qkv::testing::ThreadCount;

namespace {

using qkv::cpu::GemmMicrokernel;

// op(X), a rows x cols matrix, stored as given: transposed storage when `trans`, rows of the
// stored matrix `ld` apart. ld = 0 repeats one stored row (a broadcast operand).
template <typename T>
struct Operand {
  std::vector<T> data;
  int64_t ld = 0;
  bool trans = false;
  double at(int64_t r, int64_t c) const { return trans ? data[c * ld + r] : data[r * ld + c]; }
};

template <typename T>
Operand<T> random_operand(int64_t rows, int64_t cols, bool trans, int64_t ld, std::mt19937& rng) {
  const int64_t stored_rows = trans ? cols : rows, stored_cols = trans ? rows : cols;
  const int64_t size =
      stored_rows == 0 || stored_cols == 0 ? 0 : (stored_rows - 1) * ld + stored_cols;
  Operand<T> x{std::vector<T>(size_t(size)), ld, trans};
  std::uniform_real_distribution<double> u(-1, 1);
  for (T& v : x.data) v = T(u(rng));
  return x;
}

// The leading dimension the minimal layout would have, plus `pad`.
int64_t ld_for(int64_t rows, int64_t cols, bool trans, int64_t pad) {
  return (trans ? rows : cols) + pad;
}

struct Case {
  bool ta, tb;
  int64_t m, n, k;
  double alpha = 1, beta = 0;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;
  int64_t lda = -1, ldb = -1;  // >= 0 overrides the padded minimal leading dimension
  bool bias = false;           // a bias of n values, added to every row
  bool relu = false;           // then max(C, 0)
};

std::string describe(const Case& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " m=" + std::to_string(c.m) +
         " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) +
         " lda=" + std::to_string(c.lda) + " ldb=" + std::to_string(c.ldb) +
         (c.bias ? " +bias" : "") + (c.relu ? " relu" : "");
}

// Runs `multiply` (a gemm-shaped callable) on random data for case `c` and returns the largest
// error divided by its allowance: eps * (k + 2) * sum of |terms|, which a correct float sum of
// k products meets with room to spare and a wrong index or a missing term does not.
template <typename T, typename Multiply>
double relative_error(const Case& c, std::mt19937& rng, Multiply multiply) {
  const int64_t lda = c.lda >= 0 ? c.lda : ld_for(c.m, c.k, c.ta, c.pad_a);
  const int64_t ldb = c.ldb >= 0 ? c.ldb : ld_for(c.k, c.n, c.tb, c.pad_b);
  const int64_t ldc = c.n + c.pad_c;
  Operand<T> a = random_operand<T>(c.m, c.k, c.ta, lda, rng);
  Operand<T> b = random_operand<T>(c.k, c.n, c.tb, ldb, rng);
  Operand<T> out = random_operand<T>(c.m, c.n, false, ldc, rng);
  if (c.beta == 0)  // beta == 0 means C is not read: NaN there must not leak into the result
    for (T& v : out.data) v = std::numeric_limits<T>::quiet_NaN();
  const Operand<T> before = out;
  const Operand<T> bias = random_operand<T>(1, c.bias ? c.n : 0, false, c.n, rng);
  multiply(c.ta, c.tb, c.m, c.n, c.k, T(c.alpha), a.data.data(), lda, b.data.data(), ldb, T(c.beta),
           out.data.data(), ldc,
           qkv::cpu::GemmEpilogue<T>{c.bias ? bias.data.data() : nullptr, c.relu});
  double worst = 0;
  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        sum += a.at(i, p) * b.at(p, j);
        magnitude += std::abs(a.at(i, p) * b.at(p, j));
      }
      const double scaled = c.beta == 0 ? 0 : c.beta * before.at(i, j);
      const double added = c.bias ? bias.at(0, j) : 0;
      const double sum_total = c.alpha * sum + scaled + added;
      const double want = c.relu && sum_total < 0 ? 0 : sum_total;
      const double allowed =
          eps * double(c.k + 3) *
              (std::abs(c.alpha) * magnitude + std::abs(scaled) + std::abs(added)) +
          1e-300;
      const double err = std::abs(double(out.at(i, j)) - want) / allowed;
      worst = std::max(worst, std::isnan(err) ? 1e30 : err);
    }
  // Padding between rows of C belongs to the caller: it must come back untouched.
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = c.n; j < ldc && i * ldc + j < int64_t(out.data.size()); ++j)
      if (!(out.data[i * ldc + j] == before.data[i * ldc + j]) &&
          !(std::isnan(out.data[i * ldc + j]) && std::isnan(before.data[i * ldc + j])))
        worst = 1e30;
  return worst;
}

// Shapes chosen to hit every edge of the blocking: empty, 1 x n, m x 1, k = 1, exact register
// tiles, one past them, sizes past the cache blocks mc, kc and nc of every kernel, a B too large
// to be read in place, and large operands read in place because the other side has few tiles
// (gemm_packed.cpp): a large A with few columns, a large B with few rows, both deeper than kc.
std::vector<Case> edge_cases() {
  std::vector<Case> cases;
  const int64_t shapes[][3] = {{0, 5, 3},     {5, 0, 3},      {1, 1, 1},       {1, 37, 19},
                               {37, 1, 19},   {13, 17, 1},    {1, 1, 300},     {12, 32, 40},
                               {6, 16, 9},    {13, 33, 31},   {4, 8, 2},       {25, 70, 400},
                               {30, 650, 20}, {7, 333, 129},  {3100, 5, 3},    {90, 20, 405},
                               {2, 3, 0},     {600, 70, 450}, {150, 300, 500}, {1300, 129, 64}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& s : shapes) cases.push_back({ta, tb, s[0], s[1], s[2]});
  return cases;
}

template <typename T>
void check_all_kernels(const std::vector<Case>& cases) {
  std::mt19937 rng(7);
  for (const GemmMicrokernel<T>* kernel : qkv::cpu::gemm_kernels<T>())
    for (const Case& c : cases) {
      if (c.m == 0 || c.n == 0 || c.k == 0) continue;  // gemm_packed requires a non-empty product
      auto packed = [&](auto... args) { qkv::cpu::gemm_packed<T>(*kernel, args...); };
      double err = relative_error<T>(c, rng, packed);
      BOOST_TEST(err <= 1.0, kernel->name << " " << describe(c) << ": error " << err);
    }
}

template <typename T>
void check_gemm(const std::vector<Case>& cases) {
  std::mt19937 rng(11);
  for (const Case& c : cases) {
    double err = relative_error<T>(c, rng, qkv::cpu::gemm<T>);
    BOOST_TEST(err <= 1.0, describe(c) << ": error " << err);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gemm)

BOOST_AUTO_TEST_CASE(every_kernel_matches_reference_on_edge_shapes) {
  BOOST_TEST(!qkv::cpu::gemm_kernels<float>().empty());
  check_all_kernels<float>(edge_cases());
  check_all_kernels<double>(edge_cases());
}

BOOST_AUTO_TEST_CASE(gemm_matches_reference_on_random_shapes) {
  std::vector<Case> cases = edge_cases();
  std::mt19937 rng(3);
  std::uniform_int_distribution<int64_t> dim(1, 90);
  for (int i = 0; i < 24; ++i)
    cases.push_back({bool(i & 1), bool(i & 2), dim(rng), dim(rng), dim(rng)});
  check_gemm<float>(cases);
  check_gemm<double>(cases);
}

// m <= 4 takes the unpacked matrix-vector path (gemm_small_m.h): every row count it has, column
// counts around its 4-column and 64-column blocks, k around the vector width, padded leading
// dimensions, beta, and products large enough to be split between threads.
BOOST_AUTO_TEST_CASE(few_rows_take_the_direct_path_correctly) {
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : {1, 2, 3, 4, 5})
        for (int64_t n : {1, 3, 7, 8, 9, 63, 64, 65, 130})
          for (int64_t k : {1, 15, 16, 17, 70}) cases.push_back({ta, tb, m, n, k});
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({ta, tb, 2, 37, 33, 0.5, -2, 3, 5, 7});
      cases.push_back({ta, tb, 1, 2048, 512});  // over the threading threshold
      cases.push_back({ta, tb, 3, 700, 1000, 1.5, 1});
    }
  ThreadCount restore;
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    check_gemm<float>(cases);
    check_gemm<double>(cases);
  }
}

BOOST_AUTO_TEST_CASE(alpha_beta_and_padded_leading_dimensions) {
  std::vector<Case> cases;
  const double coefficients[][2] = {{2.5, 0}, {-1, 1}, {0.5, -2}, {0, 3}, {0, 0}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& ab : coefficients) {
        cases.push_back({ta, tb, 29, 41, 23, ab[0], ab[1]});
        cases.push_back({ta, tb, 29, 41, 23, ab[0], ab[1], 3, 5, 7});
        cases.push_back({ta, tb, 3, 4, 0, ab[0], ab[1], 0, 0, 2});  // k = 0: C = beta * C
      }
  check_gemm<float>(cases);
  check_gemm<double>(cases);
  check_all_kernels<float>(cases);
}

// The epilogue, whatever the path: the bias added once to each element and the ReLU applied to
// the finished sum, in the packed loop nest over several depth blocks (k > kc), with few rows,
// k = 0, beta, ragged tiles, and C split between threads.
BOOST_AUTO_TEST_CASE(the_epilogue_adds_the_bias_once_and_rectifies_the_sum) {
  std::vector<Case> cases;
  for (Case c : edge_cases()) {
    c.bias = true;
    cases.push_back(c);
    c.beta = 1;
    cases.push_back(c);
    c.relu = true;
    cases.push_back(c);
    c.bias = false;
    cases.push_back(c);
  }
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Case deep{ta, tb, 40, 45, 900, 0.5, 0};  // four depth blocks of the float kernels
      deep.bias = true;
      cases.push_back(deep);
      Case few{ta, tb, 3, 130, 70, 1, -1};  // the few-rows path
      few.bias = true;
      cases.push_back(few);
      Case empty{ta, tb, 5, 7, 0, 1, 2};  // k = 0: beta * C + bias
      empty.bias = true;
      cases.push_back(empty);
      Case threaded{ta, tb, 301, 67, 150};
      threaded.bias = true;
      cases.push_back(threaded);
      // A too large and C too wide to read A in place: packed panels, one depth block, so the
      // kernel finishes the tiles itself (run_finishing). Large: once per B layout.
      if (!ta) {
        Case packed{ta, tb, 700, 260, 100};
        packed.bias = packed.relu = true;
        cases.push_back(packed);
      }
      for (Case relu : {deep, few, empty, threaded}) {
        relu.relu = true;
        cases.push_back(relu);
      }
    }
  ThreadCount restore;
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    check_gemm<float>(cases);
    check_gemm<double>(cases);
  }
  check_all_kernels<float>(cases);
}

// The ReLU of the epilogue leaves a NaN sum NaN, as relu() does (max(x, 0) instructions return
// their second operand when either is NaN: the order matters), in the kernel that finishes the
// tile as it stores it and in the pass after it (k over one depth block, and over several).
BOOST_AUTO_TEST_CASE(the_epilogue_relu_keeps_a_nan_sum_nan) {
  for (int64_t k : {8, 1000}) {
    const int64_t m = 30, n = 40;
    std::vector<float> a(size_t(m * k), 0.5f), b(size_t(k * n), -0.25f), bias(size_t(n), 1.0f);
    a[size_t(2 * k + 3)] = std::numeric_limits<float>::quiet_NaN();  // row 2's sums are NaN
    std::vector<float> c(size_t(m * n), 7.0f);
    qkv::cpu::gemm<float>(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n,
                          qkv::cpu::GemmEpilogue<float>{bias.data(), true});
    const float others = std::max(0.0f, 1.0f - 0.125f * float(k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        BOOST_TEST_CONTEXT("k " << k << ", C[" << i << ", " << j << "]")
        if (i == 2)
          BOOST_TEST(std::isnan(c[size_t(i * n + j)]));
        else
          BOOST_TEST(c[size_t(i * n + j)] == others, boost::test_tools::tolerance(1e-5f));
      }
  }
}

BOOST_AUTO_TEST_CASE(broadcast_and_irrelevant_leading_dimensions) {
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // ld = 0: every row of the stored operand is the same row.
      cases.push_back({ta, tb, 19, 23, 17, 1, 0, 0, 0, 0, 0, -1});
      cases.push_back({ta, tb, 19, 23, 17, 1, 0, 0, 0, 0, -1, 0});
      // A stored dimension of size 1 makes its leading dimension meaningless; any value works.
      const int64_t junk = 1000003;
      if (!ta) cases.push_back({ta, tb, 1, 23, 17, 1, 0, 0, 0, 0, junk, -1});
      if (ta) cases.push_back({ta, tb, 19, 23, 1, 1, 0, 0, 0, 0, junk, -1});
      if (!tb) cases.push_back({ta, tb, 19, 23, 1, 1, 0, 0, 0, 0, -1, junk});
      if (tb) cases.push_back({ta, tb, 19, 1, 17, 1, 0, 0, 0, 0, -1, junk});
    }
  check_gemm<float>(cases);
  check_gemm<double>(cases);
  check_all_kernels<double>(cases);
}

BOOST_AUTO_TEST_CASE(batched_with_broadcast_operand) {
  ThreadCount restore;
  std::mt19937 rng(5);
  for (int threads : {1, 2})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        qkv::set_num_threads(threads);
        const int64_t batch = 5, m = 9, n = 14, k = 11;
        const int64_t lda = ta ? m : k, ldb = tb ? k : n;
        Operand<float> a = random_operand<float>(batch * m, k, false, k, rng);  // m*k per item
        Operand<float> b = random_operand<float>(k, n, tb, ldb, rng);           // one B, stride 0
        std::vector<float> c(batch * m * n, 1.0f);
        qkv::cpu::gemm_batched<float>(batch, ta, tb, m, n, k, 2.0f, a.data.data(), lda, m * k,
                                      b.data.data(), ldb, 0, 0.5f, c.data(), n, m * n);
        double worst = 0;
        for (int64_t s = 0; s < batch; ++s)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double want = 0.5;
              for (int64_t p = 0; p < k; ++p) {
                const float* as = a.data.data() + s * m * k;
                double av = ta ? as[p * lda + i] : as[i * lda + p];
                want += 2.0 * av * b.at(p, j);
              }
              worst = std::max(worst, std::abs(c[(s * m + i) * n + j] - want));
            }
        BOOST_TEST(worst < 1e-4, "threads=" << threads << " ta=" << ta << " tb=" << tb
                                            << ": max error " << worst);
      }
}

BOOST_AUTO_TEST_CASE(result_does_not_depend_on_thread_count) {
  ThreadCount restore;
  std::mt19937 rng(9);
  // Tall and wide shapes, so both ways of splitting C between threads run; large enough to
  // be threaded at all.
  const int64_t shapes[][3] = {{301, 67, 150}, {45, 389, 160}};
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t m = s[0], n = s[1], k = s[2];
        Operand<float> a = random_operand<float>(m, k, ta, ta ? m : k, rng);
        Operand<float> b = random_operand<float>(k, n, tb, tb ? k : n, rng);
        std::vector<float> c1(m * n), c2(m * n);
        qkv::set_num_threads(1);
        qkv::cpu::gemm<float>(ta, tb, m, n, k, 1.0f, a.data.data(), a.ld, b.data.data(), b.ld, 0.0f,
                              c1.data(), n);
        qkv::set_num_threads(2);
        qkv::cpu::gemm<float>(ta, tb, m, n, k, 1.0f, a.data.data(), a.ld, b.data.data(), b.ld, 0.0f,
                              c2.data(), n);
        double worst = 0;
        for (size_t i = 0; i < c1.size(); ++i)
          worst = std::max(worst, double(std::abs(c1[i] - c2[i])));
        BOOST_TEST(worst <= 1e-4, "m=" << m << " n=" << n << " ta=" << ta << " tb=" << tb
                                       << ": 1 vs 2 threads differ by " << worst);
        // And both are right: spot-check against the reference.
        Case c{ta, tb, m, n, k};
        double err = relative_error<float>(c, rng, qkv::cpu::gemm<float>);
        BOOST_TEST(err <= 1.0, describe(c) << " (2 threads): error " << err);
      }
}

// A product whose depth is at least four times its larger side (a weight's gradient) is summed as
// two halves of the depth (gemm.cpp, gemm_depth_halves): right against the reference with odd
// depths, alpha, beta and padding, and the same bits at 1, 2 and 3 threads.
BOOST_AUTO_TEST_CASE(a_deep_product_sums_two_halves_the_same_way_at_any_thread_count) {
  ThreadCount restore;
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({ta, tb, 40, 128, 1280});
      cases.push_back({ta, tb, 128, 96, 1281, -0.5, 1, 3, 1, 2});
      cases.push_back({ta, tb, 33, 70, 2001, 1.5, 0.25});
    }
  for (int threads : {1, 2, 3}) {
    qkv::set_num_threads(threads);
    check_gemm<float>(cases);
    check_gemm<double>(cases);
  }
  std::mt19937 rng(5);
  for (const Case& c : cases) {
    const int64_t lda = ld_for(c.m, c.k, c.ta, c.pad_a), ldb = ld_for(c.k, c.n, c.tb, c.pad_b);
    const Operand<float> a = random_operand<float>(c.m, c.k, c.ta, lda, rng);
    const Operand<float> b = random_operand<float>(c.k, c.n, c.tb, ldb, rng);
    const Operand<float> start = random_operand<float>(c.m, c.n, false, c.n, rng);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      qkv::set_num_threads(threads);
      std::vector<float> out = start.data;
      qkv::cpu::gemm<float>(c.ta, c.tb, c.m, c.n, c.k, float(c.alpha), a.data.data(), lda,
                            b.data.data(), ldb, float(c.beta), out.data(), c.n);
      results.push_back(out);
    }
    BOOST_TEST((results[0] == results[1]), describe(c) << ": 1 and 2 threads differ");
    BOOST_TEST((results[0] == results[2]), describe(c) << ": 1 and 3 threads differ");
  }
}

BOOST_AUTO_TEST_SUITE_END()
