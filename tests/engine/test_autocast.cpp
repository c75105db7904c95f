// Mixed precision (engine/autocast.h): under Autocast(bf16), matmul, linear and conv2d must equal
// the float32-accumulated product of bfloat16-rounded operands - checked against products of
// operands rounded here by an independent routine and summed in double - in the forward and in
// the backward, which autograd replays under the dtype the forward ran in.
#include <cmath>
#include <vector>

#include "engine/autocast.h"
#include "engine/backend.h"
#include "engine/cpu/direct_conv_bf16.h"
#include "engine/ops.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_error;

namespace {

// Round to bfloat16 (8 significant bits, ties to even) without the engine's bit tricks: frexp
// gives x = m 2^e with m in [0.5, 1); nearbyint rounds m 2^8 to an integer, ties to even.
double round_to_bf16(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  const double m = std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

std::vector<double> rounded(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x = round_to_bf16(x);
  return v;
}

Tensor random_f32(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return uniform(shape, -1, 1, {DType::f32}, &gen);
}

// c[m][n] = sum_k a[m][k] b[k][n] in double, with a given as [M, K] and b as [K, N] row-major.
std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b, int64_t M,
                            int64_t K, int64_t N) {
  std::vector<double> c(size_t(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n)
        c[size_t(m * N + n)] += a[size_t(m * K + k)] * b[size_t(k * N + n)];
  return c;
}

std::vector<double> transposed(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = a[size_t(r * cols + c)];
  return t;
}

// got within float32 accumulation error of want: |got - want| <= 1e-5 (1 + |want|).
void check_close(const Tensor& got, const std::vector<double>& want, const char* what) {
  BOOST_REQUIRE(got.dtype() == DType::f32);
  const std::vector<double> g = got.to_vector<double>();
  BOOST_REQUIRE_EQUAL(g.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::abs(g[i] - want[i]) / (1 + std::abs(want[i])));
  BOOST_CHECK_MESSAGE(worst <= 1e-5, what << ": worst normalized error " << worst);
}

// The largest |got - want|: shows the rounding happened (float32 products differ by ~1e-3).
double max_difference(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = got.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - want[i]));
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(autocast)

BOOST_AUTO_TEST_CASE(the_independent_rounding_agrees_with_a_cast_to_bfloat16) {
  // If these disagreed, every expectation below would be built on a different rounding.
  Tensor x = random_f32({4096}, 1);
  const std::vector<double> via_cast = cast(cast(x, DType::bf16), DType::f32).to_vector<double>();
  const std::vector<double> here = rounded(x);
  for (size_t i = 0; i < here.size(); ++i) BOOST_REQUIRE_EQUAL(via_cast[i], here[i]);
}

BOOST_AUTO_TEST_CASE(matmul_multiplies_bfloat16_rounded_operands_in_float32) {
  const int64_t M = 37, K = 53, N = 29;
  Tensor a = random_f32({M, K}, 2), b = random_f32({K, N}, 3);
  const std::vector<double> want = product(rounded(a), rounded(b), M, K, N);
  Tensor plain = matmul(a, b);
  {
    Autocast bf16(DType::bf16);
    check_close(matmul(a, b), want, "2-D");
    // a transposed operand read in place, and a batched product with a 2-D right operand
    Tensor bt = random_f32({N, K}, 4).transpose(0, 1);
    check_close(matmul(a, bt), product(rounded(a), rounded(bt.contiguous()), M, K, N),
                "transposed right operand");
    Tensor a3 = stack({a, a}, 0);
    Tensor y3 = matmul(a3, b);
    BOOST_REQUIRE(y3.shape() == Shape({2, M, N}));
    check_close(y3.narrow(0, 1, 1).reshape({M, N}), want, "batch folded into rows");
  }
  BOOST_CHECK_MESSAGE(max_difference(plain, want) > 1e-3,
                      "outside the scope the float32 product must not be rounded");
  check_close(plain, product(a.to_vector<double>(), b.to_vector<double>(), M, K, N),
              "outside the scope");
}

BOOST_AUTO_TEST_CASE(linear_rounds_input_and_weight_but_adds_the_bias_in_float32) {
  const int64_t rows = 6, in = 40, out = 11;
  Tensor x = random_f32({2, 3, in}, 5), w = random_f32({out, in}, 6);
  Tensor b = mul(random_f32({out}, 7), 0.123456789);  // values bfloat16 cannot hold
  std::vector<double> want = product(rounded(x), transposed(rounded(w), out, in), rows, in, out);
  const std::vector<double> bias = b.to_vector<double>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) want[size_t(r * out + o)] += bias[size_t(o)];
  Autocast bf16(DType::bf16);
  Tensor y = linear(x, w, b);
  BOOST_REQUIRE(y.shape() == Shape({2, 3, out}));
  check_close(y, want, "linear");
}

BOOST_AUTO_TEST_CASE(backward_products_are_bfloat16_even_outside_the_scope) {
  // L = sum(G * linear(x, W, b)): dx = G W, dW = G^T x, db = column sums of G, each product
  // taken over bfloat16-rounded factors; backward() runs after the scope has closed.
  const int64_t rows = 9, in = 33, out = 17;
  Tensor x = random_f32({rows, in}, 8).requires_grad_();
  Tensor w = random_f32({out, in}, 9).requires_grad_();
  Tensor b = random_f32({out}, 10).requires_grad_();
  Tensor g = random_f32({rows, out}, 11);
  Tensor loss;
  {
    Autocast bf16(DType::bf16);
    loss = sum(mul(linear(x, w, b), g));
  }
  BOOST_REQUIRE(autocast_dtype() == DType::f32);
  loss.backward();
  check_close(x.grad(), product(rounded(g), rounded(w), rows, out, in), "dx");
  check_close(w.grad(), product(transposed(rounded(g), rows, out), rounded(x), out, rows, in),
              "dW");
  std::vector<double> db(size_t(out), 0.0);
  const std::vector<double> gv = g.to_vector<double>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) db[size_t(o)] += gv[size_t(r * out + o)];
  check_close(b.grad(), db, "db (float32, not rounded)");

  // the same through matmul: dA = G B^T, dB = A^T G
  Tensor a = random_f32({rows, in}, 12).requires_grad_();
  Tensor m = random_f32({in, out}, 13).requires_grad_();
  {
    Autocast bf16(DType::bf16);
    loss = sum(mul(matmul(a, m), g));
  }
  loss.backward();
  check_close(a.grad(), product(rounded(g), transposed(rounded(m), in, out), rows, out, in), "dA");
  check_close(m.grad(), product(transposed(rounded(a), rows, in), rounded(g), in, rows, out), "dB");
}

BOOST_AUTO_TEST_CASE(conv2d_runs_its_gemm_on_rounded_operands) {
  Tensor x = random_f32({2, 3, 7, 6}, 14), w = random_f32({4, 3, 3, 3}, 15),
         b = random_f32({4}, 16);
  auto round_tensor = [](const Tensor& t) { return cast(cast(t, DType::bf16), DType::f32); };
  Tensor want = conv2d(round_tensor(x), round_tensor(w), b, 1, 1);
  Autocast bf16(DType::bf16);
  check_close(conv2d(x, w, b, 1, 1), want.to_vector<double>(), "conv2d");
}

BOOST_AUTO_TEST_CASE(conv2d_forward_and_backward_multiply_rounded_operands_in_every_layout) {
  // The CPU's image-by-image kernels take the products in bfloat16 themselves (where a bfloat16
  // kernel rounds while it packs): each of their layouts against float64 convolutions of the
  // rounded values. The bias's gradient is a float32 sum of the unrounded gy. Each case twice:
  // with the direct convolution's VDPBF16PS twin where it is the machine's, and with the twin
  // turned off, the float32 direct and pointwise kernels on rounded operands that an AMX machine
  // runs (on an AMX machine, both times).
  struct Case {
    int64_t N, C, H, W, O, k, stride, pad, groups;
    const char* what;
  };
  const Case cases[] = {
      {2, 3, 7, 6, 4, 3, 1, 1, 1, "gcols and col2im"},
      {2, 6, 5, 5, 4, 3, 1, 1, 1, "gx by the flipped kernel"},
      {2, 4, 6, 6, 64, 3, 1, 1, 1, "forward and weight gradient transposed"},
      {2, 4, 9, 9, 6, 3, 2, 1, 2, "stride 2, two groups"},
      {3, 8, 5, 5, 8, 1, 1, 0, 1, "1x1: the columns are x, or the pointwise kernel"},
      {2, 8, 6, 6, 16, 1, 2, 0, 1, "1x1 at stride 2"},
      {40, 7, 6, 6, 9, 1, 2, 0, 1, "1x1 at stride 2, several images to a range"},
      {2, 7, 6, 6, 9, 1, 1, 1, 1, "a padded 1x1 window: the direct convolution's 7 taps"},
      {1, 5, 6, 7, 3, 3, 1, 1, 1, "a single image"},
      {40, 3, 5, 5, 4, 3, 1, 1, 1, "several images to a range: the weight gradient sums them"},
      {2, 16, 28, 28, 16, 3, 1, 1, 1, "16 channels at 28 x 28: tiles of 3 and 2 vectors"},
      {2, 5, 3, 3, 7, 3, 1, 1, 1, "one vector of positions, 7 output channels, 5 input"},
      {2, 4, 9, 9, 6, 5, 1, 2, 1, "a 5 x 5 kernel on 4 channels: 4 taps past the blocks of 6"},
      {2, 5, 8, 8, 3, 5, 1, 2, 1, "a 5 x 5 kernel on 5 channels: 5 taps past the blocks of 6"},
      {2, 1, 8, 8, 4, 5, 1, 2, 1, "a 5 x 5 kernel on 1 channel: 1 tap past the blocks of 6"},
      {2, 5, 9, 9, 6, 3, 2, 1, 1, "stride 2: phase planes, an odd channel count"},
      {2, 16, 28, 28, 32, 3, 2, 1, 1, "stride 2 from 28 x 28"},
      {2, 5, 7, 7, 16, 3, 1, 1, 1, "gW across 16 channel lanes: rows left over, rows of odd width"},
      {2, 3, 9, 9, 32, 3, 2, 1, 1, "gW across 32 channel lanes at stride 2, odd width"},
      {3, 1, 6, 6, 64, 3, 1, 1, 1, "gW across 64 channel lanes, one row left over"},
  };
  struct TwinRestored {
    ~TwinRestored() { cpu::set_direct_conv_bf16_enabled(true); }
  } restored;
  for (bool twin : {true, false})
    for (uint64_t seed = 30; const Case& c : cases) {
      cpu::set_direct_conv_bf16_enabled(twin);
      BOOST_TEST_CONTEXT(c.what << (twin ? "" : ", the VDPBF16PS twin turned off")) {
        Tensor x = random_f32({c.N, c.C, c.H, c.W}, ++seed).requires_grad_();
        Tensor w = random_f32({c.O, c.C / c.groups, c.k, c.k}, ++seed).requires_grad_();
        Tensor b = random_f32({c.O}, ++seed).requires_grad_();
        Tensor y;
        {
          Autocast bf16(DType::bf16);
          y = conv2d(x, w, b, c.stride, c.pad, c.groups);
        }
        Tensor g = random_f32(y.shape(), ++seed);
        sum(mul(y, g)).backward();  // outside the scope: replayed in bfloat16

        auto rounded64 = [](const Tensor& t) {
          return cast(cast(cast(t.detach(), DType::bf16), DType::f32), DType::f64);
        };
        Tensor x64 = rounded64(x).requires_grad_(), w64 = rounded64(w).requires_grad_();
        Tensor y64 = conv2d(x64, w64, cast(b.detach(), DType::f64), c.stride, c.pad, c.groups);
        sum(mul(y64, rounded64(g))).backward();
        check_close(y, y64.to_vector<double>(), "y");
        check_close(x.grad(), x64.grad().to_vector<double>(), "gx");
        check_close(w.grad(), w64.grad().to_vector<double>(), "gw");
        check_close(b.grad(), sum(cast(g, DType::f64), {0, 2, 3}).to_vector<double>(), "gb");
      }
    }
}

BOOST_AUTO_TEST_CASE(float64_operands_and_nested_scopes_are_left_alone) {
  Generator gen(17);
  Tensor a = uniform({5, 7}, -1, 1, {DType::f64}, &gen),
         b = uniform({7, 3}, -1, 1, {DType::f64}, &gen);
  const std::vector<double> outside = matmul(a, b).to_vector<double>();
  {
    Autocast bf16(DType::bf16);
    BOOST_CHECK(matmul(a, b).to_vector<double>() == outside);  // bit for bit
    {
      Autocast off(DType::f32);
      BOOST_CHECK(autocast_dtype() == DType::f32);
    }
    BOOST_CHECK(autocast_dtype() == DType::bf16);
  }
  BOOST_CHECK(autocast_dtype() == DType::f32);
  check_error([] { Autocast bad(DType::i64); }, {"autocast", "int64"});
}

BOOST_AUTO_TEST_CASE(the_cpu_backend_multiplies_bfloat16_operands) {
  // The Backend contract: bf16 x bf16 gives float32 (what autocast uses), or bf16 rounded once
  // at the end; with accumulate, the product is added to what out holds.
  Tensor a = random_f32({1, 8, 16}, 18), b = random_f32({1, 16, 5}, 19);
  Tensor a16 = cast(a, DType::bf16), b16 = cast(b, DType::bf16);
  const std::vector<double> want = product(rounded(a), rounded(b), 8, 16, 5);
  Backend& cpu = backend_for(Device::cpu());

  Tensor out32 = Tensor::empty({1, 8, 5}, DType::f32);
  cpu.matmul(a16, b16, out32);
  check_close(out32, want, "bf16 x bf16 -> float32");

  Tensor out16 = Tensor::empty({1, 8, 5}, DType::bf16);
  cpu.matmul(a16, b16, out16);
  const std::vector<double> got = out16.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) {
    // one rounding of the float32 result: within half a bf16 ulp (2^-9 relative) of it
    BOOST_CHECK_MESSAGE(got[i] == round_to_bf16(got[i]) &&
                            std::abs(got[i] - want[i]) <= std::ldexp(std::abs(want[i]), -8) + 1e-6,
                        "element " << i << ": " << got[i] << " vs " << want[i]);
  }

  std::vector<double> twice = want;
  for (double& v : twice) v *= 2;
  cpu.matmul(a16, b16, out32, /*accumulate=*/true);
  check_close(out32, twice, "accumulate");
  check_error(
      [&] {
        cpu.matmul(a16, b16, Tensor::empty({1, 8, 5}, DType::f64));
      },
      {"matmul", "bfloat16", "float64"});
}

namespace {
boost::test_tools::assertion_result cpu_rounds_in_its_gemm(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result result(
      backend_for(Device::cpu()).supports_matmul_rounding_to_bf16());
  result.message() << "the CPU backend rounds operands itself only on AMX (engine/cpu/amx.h)";
  return result;
}
boost::test_tools::assertion_result cpu_rounds_first(boost::unit_test::test_unit_id id) {
  return !cpu_rounds_in_its_gemm(id);
}
}  // namespace

// Where the backend rounds float32 operands inside its GEMM, autocast skips the rounded copies;
// the product must be the one the copies give: bit for bit, since both feed the same bfloat16
// values to the same kernel. Operands as stored, transposed, and a result accumulated into.
BOOST_AUTO_TEST_CASE(rounding_inside_the_gemm_equals_rounding_first,
                     *boost::unit_test::precondition(cpu_rounds_in_its_gemm)) {
  Backend& cpu = backend_for(Device::cpu());
  const int64_t M = 45, K = 70, N = 38;
  for (bool transposed : {false, true}) {
    Tensor a = random_f32({1, M, K}, 21);
    Tensor b = transposed ? random_f32({1, N, K}, 22).transpose(1, 2) : random_f32({1, K, N}, 22);
    Tensor start = random_f32({1, M, N}, 23);
    Tensor fused = start.clone(), first = start.clone();
    cpu.matmul_rounding_to_bf16(a, b, fused, /*accumulate=*/true);
    Tensor b16 = Tensor::empty(b.shape(), DType::bf16);
    cpu.copy(b, b16);  // contiguous: the rounded-first operand is read as stored
    cpu.matmul(cast(a, DType::bf16), b16, first, /*accumulate=*/true);
    const std::vector<float> x = fused.to_vector<float>(), y = first.to_vector<float>();
    BOOST_REQUIRE_EQUAL(x.size(), y.size());
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) differ += x[i] != y[i];
    BOOST_CHECK_MESSAGE(differ == 0, (transposed ? "B transposed: " : "B as stored: ")
                                         << differ << " elements differ");
  }
  check_error(
      [&] {
        cpu.matmul_rounding_to_bf16(cast(random_f32({1, 2, 3}, 24), DType::f64),
                                    cast(random_f32({1, 3, 2}, 25), DType::f64),
                                    Tensor::empty({1, 2, 2}, DType::f64));
      },
      {"matmul", "float32", "float64"});
}

BOOST_AUTO_TEST_CASE(a_backend_without_the_fused_rounding_says_so,
                     *boost::unit_test::precondition(cpu_rounds_first)) {
  Backend& cpu = backend_for(Device::cpu());
  check_error(
      [&] {
        cpu.matmul_rounding_to_bf16(random_f32({1, 2, 3}, 26), random_f32({1, 3, 2}, 27),
                                    Tensor::empty({1, 2, 2}, DType::f32));
      },
      {"matmul", "cpu", "supports_matmul_rounding_to_bf16"});
}

BOOST_AUTO_TEST_SUITE_END()
