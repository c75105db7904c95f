// Forward values of the ops against hand-computed or independently computed numbers, and the
// errors that misuse raises.
#include <algorithm>
#include <array>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <numeric>
#include <random>

#include "engine/autocast.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_error;
using qkv::testing::check_values;
using qkv::testing::equal_values;
using qkv::testing::ThreadCount;

BOOST_AUTO_TEST_SUITE(ops)

BOOST_AUTO_TEST_CASE(unary_values) {
  Tensor x = tensor({-1.0, 0.0, 0.5, 2.0});
  check_values(neg(x), {1, 0, -0.5, -2});
  check_values(exp(x), {std::exp(-1.0), 1, std::exp(0.5), std::exp(2.0)}, 1e-5);
  check_values(abs(x), {1, 0, 0.5, 2});
  check_values(relu(x), {0, 0, 0.5, 2});
  // as torch 1.13's relu: NaN stays NaN and -0 stays -0 (its sign shows in 1 / relu(x))
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor odd = relu(tensor({std::nan(""), -0.0, -1.0}).to(dtype));
    check_values(odd, {std::nan(""), 0, 0});
    check_values(div(tensor({1.0, 1.0, 1.0}).to(dtype), odd), {std::nan(""), -INFINITY, INFINITY});
  }
  check_values(sigmoid(x),
               {1 / (1 + std::exp(1.0)), 0.5, 1 / (1 + std::exp(-0.5)), 1 / (1 + std::exp(-2.0))},
               1e-6);
  check_values(tanh(x), {std::tanh(-1.0), 0, std::tanh(0.5), std::tanh(2.0)}, 1e-6);
  // gelu(x) = x * Phi(x); Phi(1) = 0.841344746
  check_values(gelu(tensor({1.0, -1.0})), {0.841344746, -0.158655254}, 1e-6);
  check_values(gelu(tensor({1.0}), GeluApprox::tanh), {0.841191990}, 1e-6);
  Tensor p = tensor({1.0, 4.0, 9.0});
  check_values(sqrt(p), {1, 2, 3});
  check_values(rsqrt(p), {1, 0.5, 1.0 / 3}, 1e-6);
  check_values(log(p), {0, std::log(4.0), std::log(9.0)}, 1e-6);
  check_values(pow(p, 1.5), {1, 8, 27}, 1e-4);
  // sigmoid never overflows for large |x|
  check_values(sigmoid(tensor({-1000.0, 1000.0})), {0, 1});
}

BOOST_AUTO_TEST_CASE(binary_broadcasting) {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = tensor({10, 20, 30});
  Tensor col = tensor({100, 200}, {2, 1});
  check_values(add(a, row), {11, 22, 33, 14, 25, 36});
  check_values(add(a, col), {101, 102, 103, 204, 205, 206});
  check_values(mul(col, row), {1000, 2000, 3000, 2000, 4000, 6000});
  check_values(sub(row, a), {9, 18, 27, 6, 15, 24});
  check_values(div(a, tensor({2.0})), {0.5, 1, 1.5, 2, 2.5, 3});
  check_values(maximum(a, tensor({3.0})), {3, 3, 3, 4, 5, 6});
  check_values(minimum(a, tensor({3.0})), {1, 2, 3, 3, 3, 3});
  check_values(a * 2.0 + 1.0, {3, 5, 7, 9, 11, 13});
  check_values(1.0 - a, {0, -1, -2, -3, -4, -5});
  check_values(add(a.transpose(0, 1), tensor({1, 2}, {1, 2})), {2, 6, 3, 7, 4, 8});
  check_error([&] { add(a, tensor({1, 2})); }, {"add", "[2,3]", "[2]", "broadcast"});
  check_error([&] { add(a, a.to(DType::f64)); }, {"add", "float32", "float64"});
}

// The elementwise loop has fast paths for an operand constant along the innermost run (a bias, a
// mean's expanded gradient) on either side; each must give what the same op gives on contiguous
// copies, at row boundaries that fall inside a thread's chunk too.
BOOST_AUTO_TEST_CASE(binary_ops_with_an_operand_broadcast_along_the_run_match_contiguous_copies) {
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, Binary>> ops = {
      {"add", add},
      {"sub", sub},
      {"mul", mul},
      {"div", div},
      {"maximum", maximum},
      {"minimum", minimum},
      {"lt", lt},
      {"ge", ge},
      {"add_relu", add_relu},
      {"relu_backward", relu_backward},
      {"gelu_backward", [](const Tensor& gy, const Tensor& x) { return gelu_backward(gy, x); }}};
  manual_seed(5);
  const Shape full = {64, 37, 29};  // 68672 elements: two threads' chunks start mid-row
  Tensor dense = randn(full);
  // zeros and a NaN in the constant operand: relu_backward's and the comparisons' edge cases
  Tensor column = mul(randn({64, 37, 1}), gt(randn({64, 37, 1}), -0.5).to(DType::f32));
  column = where(eq(arange(64 * 37).reshape({64, 37, 1}), 100.0), tensor({std::nan("")}), column);
  Tensor spread = column.expand(full);
  for (int threads : {1, 2}) {
    ThreadCount count(threads);
    for (const auto& [name, op] : ops) {
      BOOST_TEST_CONTEXT(name << ", " << threads << " thread(s)") {
        BOOST_CHECK(equal_values(op(spread, dense), op(spread.contiguous(), dense)));
        BOOST_CHECK(equal_values(op(dense, spread), op(dense, spread.contiguous())));
      }
    }
  }
}

// gelu's backward in one pass computes what gy * gelu'(x) computed in two (the unary derivative
// kernel, then mul), bit for bit, in both dtypes and both approximations, on the vectorized float32
// path too, at one and two threads.
BOOST_AUTO_TEST_CASE(gelu_backward_is_gy_times_the_unary_derivative_bit_for_bit) {
  manual_seed(11);
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = mul(randn({64, 37, 29}), 3.0).to(dtype), gy = randn({64, 37, 29}).to(dtype);
    for (GeluApprox approximate : {GeluApprox::none, GeluApprox::tanh}) {
      const UnaryOp derivative =
          approximate == GeluApprox::tanh ? UnaryOp::gelu_tanh_grad : UnaryOp::gelu_erf_grad;
      Tensor d = Tensor::empty(x.shape(), dtype);
      x.backend().unary(derivative, x, d, 0);
      for (int threads : {1, 2}) {
        ThreadCount count(threads);
        BOOST_TEST_CONTEXT(dtype_name(dtype) << ", tanh " << (approximate == GeluApprox::tanh)
                                             << ", " << threads << " thread(s)") {
          BOOST_CHECK(equal_values(gelu_backward(gy, x, approximate), mul(gy, d)));
        }
      }
    }
  }
  check_error([&] { gelu_backward(tensor({1.0}), tensor({1.0}).to(DType::i64)); },
              {"gelu_backward", "int64"});
}

BOOST_AUTO_TEST_CASE(comparisons_where_masked_fill) {
  Tensor a = tensor({1, 5, 3});
  Tensor b = tensor({2, 5, 1});
  check_values(lt(a, b), {1, 0, 0});
  check_values(le(a, b), {1, 1, 0});
  check_values(eq(a, b), {0, 1, 0});
  check_values(ne(a, b), {1, 0, 1});
  check_values(gt(a, b), {0, 0, 1});
  check_values(ge(a, b), {0, 1, 1});
  check_values(where(gt(a, b), a, b), {2, 5, 3});
  check_values(masked_fill(a, eq(a, 5.0), -1), {1, -1, 3});
  check_values(logical_and(gt(a, 1.0), lt(a, 4.0)), {0, 0, 1});
  check_values(logical_or(gt(a, 4.0), lt(a, 2.0)), {1, 1, 0});
  check_values(logical_not(gt(a, 2.0)), {1, 0, 0});
  check_error([&] { where(a, a, b); }, {"where", "bool"});
  check_error([&] { masked_fill(a, gt(zeros({2, 3}), 0.0), 0); }, {"masked_fill"});
}

// amax's gradient is shared among tied maxima as PyTorch computes it, (gy / count) * hit: each
// tied element gets exactly gy / 3 here, which (1 / 3) * gy misses in the last bit for some gy.
BOOST_AUTO_TEST_CASE(amax_gives_each_of_three_tied_maxima_gy_over_three) {
  const std::vector<float> gys = {1.0f, 0.7f, 10.0f, 0.1f, 5.0f, 1e-3f, 3.3f, 77.0f};
  const int64_t rows = int64_t(gys.size());
  std::vector<double> xs;
  for (int64_t r = 0; r < rows; ++r) xs.insert(xs.end(), {1, 5, 2, 5, 5});
  Tensor x = tensor(xs, {rows, 5}).requires_grad_();
  Tensor gy = tensor(std::vector<double>(gys.begin(), gys.end()), {rows});
  amax(x, {1}).backward(gy);
  const std::vector<float> got = x.grad().to_vector<float>();
  int misses_of_one_third_times_gy = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float want = gys[size_t(r)] / 3.0f;  // one correctly rounded division
    misses_of_one_third_times_gy += (1.0f / 3.0f) * gys[size_t(r)] != want;
    for (int64_t c = 0; c < 5; ++c)
      BOOST_TEST(got[size_t(r * 5 + c)] == (c == 0 || c == 2 ? 0.0f : want),
                 "row " << r << ", column " << c);
  }
  BOOST_TEST(misses_of_one_third_times_gy > 0);  // the gys tell the two formulas apart
}

BOOST_AUTO_TEST_CASE(reductions) {
  Tensor x = arange(0.0, 24.0, 1.0).reshape({2, 3, 4});
  check_values(sum(x), {276});
  check_values(sum(x, {2}), {6, 22, 38, 54, 70, 86});
  check_values(sum(x, {0, 2}), {60, 92, 124});  // non-adjacent dims
  BOOST_CHECK(sum(x, {1}, true).shape() == Shape({2, 1, 4}));
  check_values(mean(x, {1}), {4, 5, 6, 7, 16, 17, 18, 19});
  check_values(var(tensor({1, 2, 3, 4})), {5.0 / 3}, 1e-6);
  check_values(var(tensor({1, 2, 3, 4}), {}, false), {1.25}, 1e-6);
  Tensor y = tensor({3, 9, 1, 4, 2, 8}, {2, 3});
  check_values(amax(y, {1}), {9, 8});
  check_values(amin(y, {0}), {3, 2, 1});
  check_values(argmax(y, 1), {1, 2});
  check_values(argmin(y, 0), {0, 1, 0});
  auto [values, indices] = max(y, 1, true);
  BOOST_CHECK(values.shape() == Shape({2, 1}));
  check_values(indices, {1, 2});
  check_values(sum(x.transpose(0, 2), {0}), {6, 54, 22, 70, 38, 86});  // strided input
  // a long float32 row keeps its precision (double accumulation)
  BOOST_CHECK_CLOSE(sum(full({1 << 20}, 0.1)).item(), 104857.6, 1e-4);
  check_error([&] { sum(x, {3}); }, {"sum", "dim 3", "rank 3"});
}

BOOST_AUTO_TEST_CASE(matmul_values) {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor({7, 8, 9, 10, 11, 12}, {3, 2});
  check_values(matmul(a, b), {58, 64, 139, 154});
  check_values(matmul(a.transpose(0, 1).contiguous().transpose(0, 1), b), {58, 64, 139, 154});
  check_values(matmul(b.transpose(0, 1), a.transpose(0, 1)), {58, 139, 64, 154});
  check_values(matmul(tensor({1, 1, 1}), b), {27, 30});
  check_values(matmul(a, tensor({1, 0, -1})), {-2, -2});
  // batch broadcasting: [2,1,2,3] @ [3,3,2] -> [2,3,2,2]
  Tensor ab = matmul(stack({a, a * 2.0}, 0).unsqueeze(1), stack({b, b, b}, 0));
  BOOST_CHECK(ab.shape() == Shape({2, 3, 2, 2}));
  check_values(select(select(ab, 0, 1), 0, 2), {116, 128, 278, 308});
  check_error([&] { matmul(a, a); }, {"matmul", "inner dimensions differ", "[2,3] @ [2,3]"});
  check_error([&] { matmul(zeros({2, 3, 4}), zeros({5, 4, 2})); }, {"matmul", "broadcast"});
}

// linear_relu is relu(linear) bit for bit on every path: the GEMM's epilogue (a float bias), the
// composed ReLU (no bias, in_features 0, bfloat16 products under autocast), ragged shapes, a
// transposed weight, and both thread counts.
BOOST_AUTO_TEST_CASE(linear_relu_equals_relu_of_linear) {
  manual_seed(23);
  ThreadCount restore;
  for (int threads : {1, 2})
    for (DType dtype : {DType::f32, DType::f64})
      for (const auto& s : std::vector<std::array<int64_t, 3>>{
               {1, 7, 5}, {37, 70, 129}, {1280, 128, 256}, {300, 64, 0}}) {
        set_num_threads(threads);
        const int64_t rows = s[0], in = s[1], out = s[2];
        Tensor x = randn({rows, in}).to(dtype), w = randn({out, in}).to(dtype);
        Tensor b = randn({out}).to(dtype);
        const std::string what = "threads " + std::to_string(threads) + " " + dtype_name(dtype) +
                                 " [" + std::to_string(rows) + "," + std::to_string(in) + "] -> " +
                                 std::to_string(out);
        auto same = [&](const Tensor& got, const Tensor& want, const std::string& how) {
          BOOST_TEST(equal_values(got, want), what << " " << how);
        };
        same(linear_relu(x, w, b), relu(linear(x, w, b)), "bias");
        same(linear_relu(x, w), relu(linear(x, w)), "no bias");
        Tensor wt = randn({in, out}).to(dtype).transpose(0, 1);
        same(linear_relu(x, wt, b), relu(linear(x, wt, b)), "transposed weight");
        if (dtype == DType::f32) {
          Autocast bf16(DType::bf16);
          same(linear_relu(x, w, b), relu(linear(x, w, b)), "autocast bf16");
        }
      }
  // and some outputs are rectified, some not: the comparison has both kinds
  Tensor y = linear_relu(randn({64, 16}), randn({16, 16}), randn({16}));
  BOOST_TEST(sum(eq(y, 0.0).to(DType::f32)).item() > 0);
  BOOST_TEST(sum(gt(y, 0.0).to(DType::f32)).item() > 0);
}

// add_relu is relu(add(a, b)) in one pass: the same bits (a -0 sum stays -0, a NaN passes, an
// infinite sum stays), with b the same shape, a row or a column broadcast, and the same gradients
// to a and b (summed back over b's broadcast dims), in both dtypes.
BOOST_AUTO_TEST_CASE(add_relu_equals_relu_of_add) {
  manual_seed(24);
  const Shape full = {64, 37, 29};
  for (DType dtype : {DType::f32, DType::f64})
    for (const Shape& b_shape : {full, Shape{29}, Shape{64, 37, 1}}) {
      BOOST_TEST_CONTEXT(dtype_name(dtype) << " b " << shape_str(b_shape)) {
        std::vector<double> av = randn(full).to_vector<double>();
        std::vector<double> bv = randn(b_shape).to_vector<double>();
        // sums at the first elements: -0 + -0, NaN, +inf, -inf, and v + -v (+0)
        av[0] = -0.0, bv[0] = -0.0, av[1] = std::nan(""), av[2] = INFINITY, av[3] = -INFINITY;
        av[4] = -tensor(bv, b_shape).expand(full).contiguous().to_vector<double>()[4];
        Tensor a = tensor(av, full, {.dtype = dtype}).requires_grad_();
        Tensor b = tensor(bv, b_shape, {.dtype = dtype}).requires_grad_();
        const Tensor fused = add_relu(a, b), composed = relu(add(a, b));
        BOOST_TEST(equal_values(fused, composed));
        const std::vector<double> y = fused.to_vector<double>();
        BOOST_TEST((y[0] == 0 && std::signbit(y[0])));
        BOOST_TEST((std::isnan(y[1]) && y[2] == INFINITY && y[3] == 0 && y[4] == 0));
        Tensor r = randn(full).to(dtype);
        const std::vector<Tensor> g_fused = grad(sum(mul(fused, r)), {a, b});
        const std::vector<Tensor> g_composed = grad(sum(mul(composed, r)), {a, b});
        BOOST_TEST(equal_values(g_fused[0], g_composed[0]));
        BOOST_TEST(equal_values(g_fused[1], g_composed[1]));
      }
    }
  // the comparison has both kinds: clipped and passed values
  Tensor y = add_relu(randn({64, 16}), randn({16}));
  BOOST_TEST(sum(eq(y, 0.0).to(DType::f32)).item() > 0);
  BOOST_TEST(sum(gt(y, 0.0).to(DType::f32)).item() > 0);
  check_error([&] { add_relu(randn({2, 3}), randn({2})); }, {"add_relu", "[2,3]", "[2]"});
}

BOOST_AUTO_TEST_CASE(matmul_against_naive_loops) {
  manual_seed(11);
  for (auto [m, k, n] : {std::tuple{1, 7, 5}, {9, 1, 4}, {33, 17, 65}, {64, 64, 64}}) {
    Tensor a = randn({m, k}, {DType::f64}), b = randn({k, n}, {DType::f64});
    auto av = a.to_vector<double>(), bv = b.to_vector<double>();
    std::vector<double> expect(m * n, 0.0);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        for (int p = 0; p < k; ++p) expect[i * n + j] += av[i * k + p] * bv[p * n + j];
    check_values(matmul(a, b), expect, 1e-10);
    check_values(matmul(a.to(DType::f32), b.to(DType::f32)), expect, 1e-3);
  }
}

// Attention's products: q, k, v projected as [B, L, H, d] and viewed as [B, H, L, d], whose batch
// dims take two strides. The CPU backend reads them in place (backend.h, two batch dims); the
// products must equal loops over the original [B, L, H, d] layout, and allocate only the result.
BOOST_AUTO_TEST_CASE(matmul_reads_attention_heads_in_place) {
  manual_seed(12);
  const int B = 2, T = 8, S = 8, H = 4, D = 8;
  Tensor q4 = randn({B, T, H, D}, {DType::f64}), k4 = randn({B, S, H, D}, {DType::f64});
  Tensor v4 = randn({B, S, H, D}, {DType::f64});
  auto qv = q4.to_vector<double>(), kv = k4.to_vector<double>(), vv = v4.to_vector<double>();
  auto at = [&](const std::vector<double>& x, int L, int b, int l, int h, int d) {
    return x[((b * L + l) * H + h) * D + d];
  };
  std::vector<double> scores(B * H * T * S, 0.0), out(B * H * T * D, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t)
        for (int s = 0; s < S; ++s)
          for (int d = 0; d < D; ++d)
            scores[((b * H + h) * T + t) * S + s] += at(qv, T, b, t, h, d) * at(kv, S, b, s, h, d);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t)
        for (int e = 0; e < D; ++e)
          for (int s = 0; s < S; ++s)
            out[((b * H + h) * T + t) * D + e] +=
                scores[((b * H + h) * T + t) * S + s] * at(vv, S, b, s, h, e);

  const Tensor q = q4.transpose(1, 2), k = k4.transpose(1, 2), v = v4.transpose(1, 2);
  Backend& cpu = backend_for(Device::cpu());
  BOOST_REQUIRE(cpu.supports_matmul_with_two_batch_dims());
  const size_t before = cpu.memory_stats().bytes_in_use;
  cpu.reset_peak_memory();
  Tensor s = matmul(q, k.transpose(-2, -1));
  // 4 KiB each, a power of two: the allocator's rounding cannot blur a copy of q or of k
  const size_t result_bytes = size_t(s.numel()) * sizeof(double);
  BOOST_CHECK_LT(cpu.memory_stats().peak_bytes - before, result_bytes + size_t(q.numel()) * 8);
  check_values(s, scores, 1e-10);
  check_values(matmul(s, v), out, 1e-10);

  // an operand shared by every head (stride 0 along H) next to a permuted one
  Tensor w = randn({B, 1, D, 5}, {DType::f64});
  auto wv = w.to_vector<double>();
  std::vector<double> qw(B * H * T * 5, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < 5; ++j)
          for (int d = 0; d < D; ++d)
            qw[((b * H + h) * T + t) * 5 + j] += at(qv, T, b, t, h, d) * wv[(b * D + d) * 5 + j];
  check_values(matmul(q, w), qw, 1e-10);

  // float32, and bfloat16 under autocast: in place gives the very bits the contiguous copies give
  for (DType compute : {DType::f32, DType::bf16}) {
    Autocast autocast(compute);
    const Tensor qf = q.to(DType::f32), kf = k.to(DType::f32), vf = v.to(DType::f32);
    Tensor in_place = matmul(matmul(qf, kf.transpose(-2, -1)), vf);
    Tensor copied =
        matmul(matmul(qf.contiguous(), kf.contiguous().transpose(-2, -1)), vf.contiguous());
    BOOST_TEST(in_place.to_vector<float>() == copied.to_vector<float>(),
               boost::test_tools::per_element());
    check_values(in_place, out, compute == DType::f32 ? 1e-3 : 0.3);
  }
}

// matmul picks, per operand, one batch stride, two, or a contiguous copy (engine/ops/matmul.cpp).
// Random layouts - permuted batch dims, transposed matrices, broadcast (expanded) dims, size-1
// dims, sliced storage - against the product of contiguous copies computed by naive loops.
BOOST_AUTO_TEST_CASE(matmul_of_random_layouts_matches_contiguous_loops) {
  std::mt19937 rng(2024);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  // A view of shape `shape` over fresh random storage, laid out at random: its dims permuted in
  // memory, maybe every other element (a slice), maybe stride 0 along one dim of size > 1.
  auto random_layout = [&](const Shape& shape) {
    std::vector<int> order(shape.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    Shape stored;
    for (int d : order) stored.push_back(shape[size_t(d)]);
    const bool sliced = pick(0, 3) == 0;
    if (sliced) stored.back() *= 2;
    Tensor t = randn(stored, {DType::f64});
    if (sliced) t = narrow(t, int(stored.size()) - 1, 0, stored.back() / 2);
    std::vector<int> back(shape.size());  // the permutation that undoes `order`
    for (size_t i = 0; i < order.size(); ++i) back[size_t(order[i])] = int(i);
    t = permute(t, back);
    const int d = pick(0, int(shape.size()) - 1);
    if (pick(0, 3) == 0 && shape[size_t(d)] > 1) {  // broadcast one dim: expand a size-1 slice
      t = narrow(t, d, 0, 1).expand(shape);
    }
    return t;
  };
  auto naive = [](const Tensor& a, const Tensor& b) {  // [batch, m, k] @ [batch, k, n], contiguous
    const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
    auto av = a.to_vector<double>(), bv = b.to_vector<double>();
    std::vector<double> out(size_t(batch * m * n), 0.0);
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c)
          for (int64_t p = 0; p < k; ++p)
            out[size_t((i * m + r) * n + c)] +=
                av[size_t((i * m + r) * k + p)] * bv[size_t((i * k + p) * n + c)];
    return out;
  };
  for (int trial = 0; trial < 200; ++trial) {
    const int batch_dims = pick(0, 3);
    Shape batch;
    for (int d = 0; d < batch_dims; ++d) batch.push_back(pick(1, 4));
    const int64_t m = pick(1, 9), k = pick(1, 9), n = pick(1, 9);
    Shape a_shape = batch, b_shape = batch;
    a_shape.insert(a_shape.end(), {m, k});
    b_shape.insert(b_shape.end(), {k, n});
    const Tensor a = random_layout(a_shape), b = random_layout(b_shape);
    const int64_t count = numel(batch);
    const std::vector<double> expected =
        naive(a.contiguous().reshape({count, m, k}), b.contiguous().reshape({count, k, n}));
    Tensor product = matmul(a, b);
    BOOST_TEST_CONTEXT("trial " << trial << ": " << shape_str(a.shape()) << " strides "
                                << shape_str(a.strides()) << " @ " << shape_str(b.shape())
                                << " strides " << shape_str(b.strides())) {
      check_values(product, expected, 1e-12);
    }
  }
}

BOOST_AUTO_TEST_CASE(softmax_and_log_softmax) {
  Tensor x = tensor({1, 2, 3, 1000, 1000, 1000}, {2, 3});
  double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0), z = e1 + e2 + e3;
  check_values(softmax(x, 1), {e1 / z, e2 / z, e3 / z, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-6);
  check_values(log_softmax(x, 1),
               {1 - std::log(z), 2 - std::log(z), 3 - std::log(z), -std::log(3.0), -std::log(3.0),
                -std::log(3.0)},
               1e-5);
  // along dim 0 equals the transpose's along dim 1
  check_values(softmax(x, 0),
               softmax(x.transpose(0, 1), 1).transpose(0, 1).contiguous().to_vector<double>(),
               1e-7);
  // a fully masked row gives zeros, not NaN
  Tensor masked = tensor({-INFINITY, -INFINITY, 0, 1}, {2, 2});
  check_values(softmax(masked, 1), {0, 0, 1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-1.0))}, 1e-6);
}

BOOST_AUTO_TEST_CASE(layer_norm_values) {
  Tensor x = tensor({1, 2, 3, 4, 2, 2, 2, 2}, {2, 4});
  // row 1: mean 2.5, var 1.25
  double s = 1 / std::sqrt(1.25 + 1e-5);
  Tensor w = tensor({1, 2, 1, 1}), b = tensor({0, 0, 1, 0});
  check_values(layer_norm(x, {4}, w, b), {-1.5 * s, -1.0 * s, 0.5 * s + 1, 1.5 * s, 0, 0, 1, 0},
               1e-5);
  check_error([&] { layer_norm(x, {3}); }, {"layer_norm", "[3]", "[2,4]"});
  check_error([&] { layer_norm(x, {4}, tensor({1, 2})); }, {"layer_norm", "weight", "[2]"});
}

// The row kernel (its sums in sixteen lanes, a remainder, a pairwise total) against layer_norm
// written out in ops, in float64: values and all three gradients, at widths below, at and past
// multiples of sixteen, with and without the affine parameters.
BOOST_AUTO_TEST_CASE(layer_norm_kernel_matches_its_definition_at_every_width) {
  for (int64_t cols : {5, 16, 17, 31, 32, 48, 128, 301})
    for (bool affine : {true, false}) {
      const TensorOptions f64{DType::f64};
      Tensor x = add(mul(randn({7, cols}, f64), 3.0), 0.5).requires_grad_();
      Tensor w = add(randn({cols}, f64), 1.0).requires_grad_(),
             b = randn({cols}, f64).requires_grad_();
      Tensor g = randn({7, cols}, f64);
      Tensor y = affine ? layer_norm(x, {cols}, w, b, 1e-5) : layer_norm(x, {cols});
      Tensor centered = sub(x, mean(x, {1}, true));
      Tensor h = mul(centered, rsqrt(add(mean(mul(centered, centered), {1}, true), 1e-5)));
      Tensor reference = affine ? add(mul(h, w), b) : h;
      const std::string where = std::to_string(cols) + (affine ? " columns, affine" : " columns");
      BOOST_TEST(amax(abs(sub(y, reference))).item() < 1e-12, where);
      y.backward(g);
      std::vector<Tensor> grads{x.grad()};
      if (affine) grads.push_back(w.grad()), grads.push_back(b.grad());
      std::vector<Tensor> inputs{x};
      if (affine) inputs.push_back(w), inputs.push_back(b);
      for (Tensor& t : inputs) t.zero_grad();
      reference.backward(g);
      for (size_t i = 0; i < grads.size(); ++i)
        BOOST_TEST(amax(abs(sub(grads[i], inputs[i].grad()))).item() < 1e-10,
                   where << ", gradient " << i);
    }
}

// float32 rows sum in float lanes, and the backward sums the weight and bias gradients per chunk
// of 32 rows: against the float64 kernel on the same values, over row counts below, at and past
// whole chunks, and the same bits at one thread and two. The values are near 100 with a spread of
// 0.6: a float32 mean is then off by up to half an ulp of 100, about 1e-5 of a row's spread, which
// x - mean carries into every output (measured up to 4.4e-4 of an element, floored at 1% of the
// tensor's largest; the bound 1e-3). The mean's shift by x[0] is held by the emulated GPU suite's
// row_kernels/layer_norm_forward_and_backward (777 columns near 100), which fails without it.
BOOST_AUTO_TEST_CASE(layer_norm_float32_follows_float64_and_ignores_the_thread_count) {
  for (int64_t rows : {1, 31, 32, 75, 1280})
    for (int64_t cols : {5, 128, 301, 2048}) {
      // a mean far from zero against the spread: the statistics' rounding shows in x - mean
      Tensor x = add(mul(randn({rows, cols}), 0.6), 100.0), w = add(randn({cols}), 1.0),
             b = randn({cols}), g = randn({rows, cols});
      auto run = [&](DType dtype, int threads) {
        const ThreadCount count(threads);
        Tensor xd = x.to(dtype).detach().requires_grad_(),
               wd = w.to(dtype).detach().requires_grad_(),
               bd = b.to(dtype).detach().requires_grad_();
        Tensor y = layer_norm(xd, {cols}, wd, bd, 1e-5);
        y.backward(g.to(dtype));
        return std::vector<Tensor>{y, xd.grad(), wd.grad(), bd.grad()};
      };
      const std::vector<Tensor> one = run(DType::f32, 1), two = run(DType::f32, 2),
                                exact = run(DType::f64, 1);
      const char* names[] = {"y", "x.grad", "weight.grad", "bias.grad"};
      for (size_t i = 0; i < one.size(); ++i) {
        const std::string where =
            std::to_string(rows) + "x" + std::to_string(cols) + " " + names[i];
        BOOST_TEST(equal_values(one[i], two[i]), where << ": 1 and 2 threads differ");
        // each element relative to itself, floored at 1% of the tensor's largest
        const double floor = 1e-2 * amax(abs(exact[i])).item();
        const double err =
            amax(div(abs(sub(one[i].to(DType::f64), exact[i])), add(abs(exact[i]), floor))).item();
        BOOST_TEST(err < 1e-3, where << ": " << err);
      }
    }
}

BOOST_AUTO_TEST_CASE(embedding_gather_index_select) {
  Tensor w = tensor({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor ids = tensor_i64({2, 0, 2, 1}, {2, 2});
  Tensor e = embedding(w, ids);
  BOOST_CHECK(e.shape() == Shape({2, 2, 2}));
  check_values(e, {20, 21, 0, 1, 20, 21, 10, 11});
  check_values(index_select(w, 1, tensor_i64({1})), {1, 11, 21});
  check_values(gather(w, 1, tensor_i64({1, 0, 0}, {3, 1})), {1, 10, 20});
  check_error([&] { embedding(w, tensor_i64({3})); }, {"embedding", "index 3", "size 3"});
  check_error([&] { embedding(w, tensor_i64({-1})); }, {"index -1"});
  check_error([&] { embedding(w, tensor({1.0})); }, {"embedding", "int64", "float32"});
  check_error([&] { gather(w, 1, tensor_i64({5}, {1, 1})); }, {"gather", "index shape"});
}

BOOST_AUTO_TEST_CASE(cat_stack_split) {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2}), b = tensor({5, 6}, {2, 1});
  check_values(cat({a, b}, 1), {1, 2, 5, 3, 4, 6});
  check_values(cat({a, a}, 0), {1, 2, 3, 4, 1, 2, 3, 4});
  check_values(stack({a, a}, 2).narrow(2, 1, 1), {1, 2, 3, 4});
  auto parts = split(arange(0.0, 5.0, 1.0), 2, 0);
  BOOST_REQUIRE_EQUAL(parts.size(), 3u);
  check_values(parts[2], {4});
  auto ch = chunk(arange(0.0, 6.0, 1.0), 3, 0);
  check_values(ch[1], {2, 3});
  check_error([&] { cat({a, b}, 0); }, {"cat", "tensor 1", "[2,1]"});
}

BOOST_AUTO_TEST_CASE(cross_entropy_values) {
  Tensor logits = tensor({2, 1, 0, 0, 0, 3}, {2, 3});
  Tensor target = tensor_i64({0, 2});
  double l0 = -(2 - std::log(std::exp(2.0) + std::exp(1.0) + 1));
  double l1 = -(3 - std::log(2 + std::exp(3.0)));
  check_values(cross_entropy(logits, target), {(l0 + l1) / 2}, 1e-6);
  check_values(cross_entropy(logits, target, -100, 0, Reduction::none), {l0, l1}, 1e-6);
  // an ignored target drops out of the mean entirely
  check_values(cross_entropy(logits, tensor_i64({0, -100})), {l0}, 1e-6);
  // label smoothing eps: (1-eps)*nll + eps*mean_c(-log p_c)
  Tensor logp = log_softmax(logits, 1);
  double u0 = -mean(select(logp, 0, 0)).item(), u1 = -mean(select(logp, 0, 1)).item();
  double eps = 0.2;
  check_values(cross_entropy(logits, target, -100, eps),
               {((1 - eps) * l0 + eps * u0 + (1 - eps) * l1 + eps * u1) / 2}, 1e-5);
  check_error([&] { cross_entropy(logits, tensor_i64({0, 3})); }, {"nll_loss", "index 3"});
  check_error([&] { cross_entropy(logits, tensor_i64({0})); }, {"nll_loss", "target shape"});
}

BOOST_AUTO_TEST_CASE(dropout_statistics) {
  Generator gen(5);
  Tensor x = ones({100000});
  Tensor y = dropout(x, 0.25, true, &gen);
  double kept = mean(gt(y, 0.0).to(DType::f32)).item();
  BOOST_CHECK_CLOSE(kept, 0.75, 2.0);
  BOOST_CHECK_CLOSE(amax(y).item(), 1 / 0.75, 1e-4);
  BOOST_CHECK_CLOSE(mean(y).item(), 1.0, 2.0);
  check_values(dropout(x.narrow(0, 0, 3), 0.5, false), {1, 1, 1});
  check_error([&] { dropout(x, 1.5); }, {"dropout", "1.5"});
}

BOOST_AUTO_TEST_CASE(results_do_not_depend_on_thread_count) {
  manual_seed(2);
  Tensor x = randn({64, 300});
  Tensor w = randn({300, 50});
  set_num_threads(1);
  auto one = softmax(matmul(x, w), 1).to_vector<double>();
  auto s1 = sum(x, {0}).to_vector<double>();
  set_num_threads(2);
  auto two = softmax(matmul(x, w), 1).to_vector<double>();
  auto s2 = sum(x, {0}).to_vector<double>();
  check_values(tensor(one), two, 1e-6);
  check_values(tensor(s1), s2, 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
