// Elementwise kernels on the GPU against the CPU: copy/cast, fill, unary, binary, where, on
// contiguous, transposed and broadcast (stride-0) operands.
#include <cmath>
#include <limits>

#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

namespace {

const DType kAllTypes[] = {DType::f32, DType::f64, DType::i64, DType::b8, DType::bf16, DType::i8};

// A [4, 3, 5] view of a [5, 3, 4] tensor (first and last dims swapped): strided, not contiguous.
Tensor transposed_view(const Tensor& t) { return t.transpose(0, 2); }

}  // namespace

BOOST_AUTO_TEST_SUITE(elementwise)

BOOST_AUTO_TEST_CASE(copy_casts_between_every_dtype_pair_on_strided_views,
                     *utf::precondition(gpu_present)) {
  for (DType from : kAllTypes) {
    Tensor x = random_tensor({5, 3, 4}, from, -3, 3, 11);
    Tensor xg = on_gpu(x);
    for (DType to : kAllTypes) {
      // strided source into a contiguous destination
      Tensor want = Tensor::empty({4, 3, 5}, to);
      Tensor got = Tensor::empty({4, 3, 5}, to, Device::cuda());
      host().copy(transposed_view(x), want);
      gpu().copy(transposed_view(xg), got);
      check_equal(got, want, std::string("copy ") + dtype_name(from) + " -> " + dtype_name(to));
      // contiguous source into a strided destination (every element is written)
      Tensor src = random_tensor({4, 3, 5}, from, -3, 3, 12);
      Tensor want2 = Tensor::empty({5, 3, 4}, to);
      Tensor got2 = Tensor::empty({5, 3, 4}, to, Device::cuda());
      host().copy(src, transposed_view(want2));
      gpu().copy(on_gpu(src), transposed_view(got2));
      check_equal(got2, want2,
                  std::string("copy into a view ") + dtype_name(from) + " -> " + dtype_name(to));
    }
  }
}

BOOST_AUTO_TEST_CASE(float_to_integer_casts_saturate_like_the_cpu,
                     *utf::precondition(gpu_present)) {
  // NaN -> 0 and out-of-range values -> the nearest end on both sides (engine/scalar_math.h)
  const double inf = std::numeric_limits<double>::infinity();
  Tensor odd = tensor({std::nan(""), inf, -inf, 1e19, -1e19, -9.9, 127.9, -128.9, 300.0});
  for (DType from : {DType::f32, DType::f64})
    for (DType to : {DType::i64, DType::i8}) {
      Tensor x = odd.to(from);
      check_equal(on_gpu(x).to(to), x.to(to),
                  std::string("cast ") + dtype_name(from) + " -> " + dtype_name(to));
    }
}

BOOST_AUTO_TEST_CASE(copy_reads_broadcast_views, *utf::precondition(gpu_present)) {
  Tensor row = random_tensor({1, 7}, DType::f32, -1, 1, 3);
  Tensor want = Tensor::empty({5, 7}), got = Tensor::empty({5, 7}, DType::f32, Device::cuda());
  host().copy(row.expand({5, 7}), want);
  gpu().copy(on_gpu(row).expand({5, 7}), got);
  check_equal(got, want, "copy of an expanded row");
}

BOOST_AUTO_TEST_CASE(fill_sets_every_element, *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64, DType::i64, DType::b8}) {
    Tensor want = Tensor::empty({1000, 3}, t), got = Tensor::empty({1000, 3}, t, Device::cuda());
    host().fill(want, 3.0);
    gpu().fill(got, 3.0);
    check_equal(got, want, std::string("fill ") + dtype_name(t));
  }
  Tensor bf = Tensor::empty({17}, DType::bf16, Device::cuda());
  gpu().fill(bf, 1.0 / 3);
  Tensor want = Tensor::empty({17}, DType::f32);
  host().fill(want, float(bf16_to_float(float_to_bf16(1.0f / 3))));
  check_equal(bf.to(DType::f32), want, "fill bf16 rounds like the CPU");
}

BOOST_AUTO_TEST_CASE(floating_unary_ops_match_the_cpu, *utf::precondition(gpu_present)) {
  struct Case {
    UnaryOp op;
    const char* name;
    bool positive_only;
    double scalar;
  };
  const Case cases[] = {
      {UnaryOp::neg, "neg", false, 0},
      {UnaryOp::exp, "exp", false, 0},
      {UnaryOp::log, "log", true, 0},
      {UnaryOp::sqrt, "sqrt", true, 0},
      {UnaryOp::rsqrt, "rsqrt", true, 0},
      {UnaryOp::abs, "abs", false, 0},
      {UnaryOp::sign, "sign", false, 0},
      {UnaryOp::tanh, "tanh", false, 0},
      {UnaryOp::sigmoid, "sigmoid", false, 0},
      {UnaryOp::relu, "relu", false, 0},
      {UnaryOp::gelu_erf, "gelu_erf", false, 0},
      {UnaryOp::gelu_tanh, "gelu_tanh", false, 0},
      {UnaryOp::gelu_erf_grad, "gelu_erf_grad", false, 0},
      {UnaryOp::gelu_tanh_grad, "gelu_tanh_grad", false, 0},
      {UnaryOp::square, "square", false, 0},
      {UnaryOp::reciprocal, "reciprocal", true, 0},
      {UnaryOp::pow_scalar, "pow 2", false, 2},
      {UnaryOp::pow_scalar, "pow 1.5", true, 1.5},
      {UnaryOp::add_scalar, "add", false, 0.75},
      {UnaryOp::mul_scalar, "mul", false, -1.25},
      {UnaryOp::rsub_scalar, "rsub", false, 2},
  };
  for (DType t : {DType::f32, DType::f64}) {
    for (const Case& c : cases) {
      Tensor x = random_tensor({5, 3, 4}, t, c.positive_only ? 0.1 : -4, 4, 21);
      Tensor want = Tensor::empty({4, 3, 5}, t), got = Tensor::empty({4, 3, 5}, t, Device::cuda());
      host().unary(c.op, transposed_view(x), want, c.scalar);
      gpu().unary(c.op, transposed_view(on_gpu(x)), got, c.scalar);
      // libdevice's erf/tanh/exp are within 2 ulp of glibc's, and the GPU fuses multiply-adds;
      // near the zeros of gelu_*_grad that shows against the 1%-of-max floor
      check_close(got, want, t == DType::f32 ? 5e-5 : 5e-12,
                  std::string(c.name) + " " + dtype_name(t));
    }
  }
}

BOOST_AUTO_TEST_CASE(integer_comparison_and_logical_unary_ops, *utf::precondition(gpu_present)) {
  Tensor xi = random_tensor({64}, DType::i64, -10, 10, 5);
  for (UnaryOp op : {UnaryOp::neg, UnaryOp::abs, UnaryOp::add_scalar, UnaryOp::mul_scalar}) {
    Tensor want = Tensor::empty({64}, DType::i64),
           got = Tensor::empty({64}, DType::i64, Device::cuda());
    host().unary(op, xi, want, 3);
    gpu().unary(op, on_gpu(xi), got, 3);
    check_equal(got, want, "int64 unary " + std::to_string(int(op)));
  }
  for (DType t : {DType::f32, DType::f64, DType::i64}) {
    Tensor x = random_tensor({64}, t, -3, 3, 6);
    for (UnaryOp op : {UnaryOp::eq_scalar, UnaryOp::lt_scalar, UnaryOp::gt_scalar}) {
      Tensor want = Tensor::empty({64}, DType::b8),
             got = Tensor::empty({64}, DType::b8, Device::cuda());
      host().unary(op, x, want, 1);
      gpu().unary(op, on_gpu(x), got, 1);
      check_equal(got, want, std::string("compare scalar ") + dtype_name(t));
    }
  }
  Tensor m = random_tensor({64}, DType::b8, 0, 1, 7);
  Tensor want = Tensor::empty({64}, DType::b8),
         got = Tensor::empty({64}, DType::b8, Device::cuda());
  host().unary(UnaryOp::logical_not, m, want, 0);
  gpu().unary(UnaryOp::logical_not, on_gpu(m), got, 0);
  check_equal(got, want, "logical_not");
}

BOOST_AUTO_TEST_CASE(binary_ops_with_broadcast_operands, *utf::precondition(gpu_present)) {
  const BinaryOp arithmetic[] = {BinaryOp::add,
                                 BinaryOp::sub,
                                 BinaryOp::mul,
                                 BinaryOp::div,
                                 BinaryOp::maximum,
                                 BinaryOp::minimum,
                                 BinaryOp::pow,
                                 BinaryOp::add_relu,
                                 BinaryOp::relu_backward,
                                 BinaryOp::gelu_erf_backward,
                                 BinaryOp::gelu_tanh_backward};
  const BinaryOp comparisons[] = {BinaryOp::eq, BinaryOp::ne, BinaryOp::lt,
                                  BinaryOp::le, BinaryOp::gt, BinaryOp::ge};
  for (DType t : {DType::f32, DType::f64, DType::i64}) {
    // a is [6, 5] transposed from [5, 6]; b is a [1, 5] row broadcast over 6 rows (stride 0)
    Tensor a = random_tensor({5, 6}, t, 0.5, 4, 31), b = random_tensor({1, 5}, t, 0.5, 3, 32);
    Tensor av = a.transpose(0, 1), bv = b.expand({6, 5});
    Tensor ag = on_gpu(a).transpose(0, 1), bg = on_gpu(b).expand({6, 5});
    for (BinaryOp op : arithmetic) {
      const bool floating_only = op == BinaryOp::pow || op == BinaryOp::gelu_erf_backward ||
                                 op == BinaryOp::gelu_tanh_backward;
      if (floating_only && t == DType::i64) continue;
      Tensor want = Tensor::empty({6, 5}, t), got = Tensor::empty({6, 5}, t, Device::cuda());
      host().binary(op, av, bv, want);
      gpu().binary(op, ag, bg, got);
      check_close(got, want, 4 * tolerance(t),
                  "binary " + std::to_string(int(op)) + " " + dtype_name(t));
    }
    {  // add_relu again with b negative: the sums take both signs, so the ReLU clips some
      Tensor nb = random_tensor({1, 5}, t, -4, -0.5, 33);
      Tensor want = Tensor::empty({6, 5}, t), got = Tensor::empty({6, 5}, t, Device::cuda());
      host().binary(BinaryOp::add_relu, av, nb.expand({6, 5}), want);
      gpu().binary(BinaryOp::add_relu, ag, on_gpu(nb).expand({6, 5}), got);
      check_close(got, want, 4 * tolerance(t), std::string("add_relu clipping ") + dtype_name(t));
    }
    for (BinaryOp op : comparisons) {
      Tensor want = Tensor::empty({6, 5}, DType::b8),
             got = Tensor::empty({6, 5}, DType::b8, Device::cuda());
      host().binary(op, av, av.detach(), want);  // equal operands exercise eq/le/ge ties
      gpu().binary(op, ag, ag.detach(), got);
      check_equal(got, want, "compare equal " + std::to_string(int(op)));
      host().binary(op, av, bv, want);
      gpu().binary(op, ag, bg, got);
      check_equal(got, want, "compare " + std::to_string(int(op)) + " " + dtype_name(t));
    }
  }
  Tensor p = random_tensor({40}, DType::b8, 0, 1, 8), q = random_tensor({40}, DType::b8, 0, 1, 9);
  for (BinaryOp op : {BinaryOp::logical_and, BinaryOp::logical_or}) {
    Tensor want = Tensor::empty({40}, DType::b8),
           got = Tensor::empty({40}, DType::b8, Device::cuda());
    host().binary(op, p, q, want);
    gpu().binary(op, on_gpu(p), on_gpu(q), got);
    check_equal(got, want, "logical " + std::to_string(int(op)));
  }
}

BOOST_AUTO_TEST_CASE(where_selects_with_broadcast_condition, *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64, DType::i64, DType::b8}) {
    Tensor cond = random_tensor({4, 1}, DType::b8, 0, 1, 41);
    Tensor a = random_tensor({4, 9}, t, -5, 5, 42), b = random_tensor({9}, t, -5, 5, 43);
    Tensor want = Tensor::empty({4, 9}, t), got = Tensor::empty({4, 9}, t, Device::cuda());
    host().where(cond.expand({4, 9}), a, b.expand({4, 9}), want);
    gpu().where(on_gpu(cond).expand({4, 9}), on_gpu(a), on_gpu(b).expand({4, 9}), got);
    check_equal(got, want, std::string("where ") + dtype_name(t));
  }
}

BOOST_AUTO_TEST_CASE(large_tensors_cover_the_grid_stride_loop, *utf::precondition(gpu_present)) {
  // more elements than one grid covers (65536 blocks x 256 threads), so threads loop
  Tensor x = random_tensor({int64_t(1) << 25}, DType::f32, -2, 2, 51);
  Tensor want = Tensor::empty(x.shape()),
         got = Tensor::empty(x.shape(), DType::f32, Device::cuda());
  host().unary(UnaryOp::tanh, x, want, 0);
  gpu().unary(UnaryOp::tanh, on_gpu(x), got, 0);
  check_close(got, want, 4 * tolerance(DType::f32), "tanh over 2^25 elements");
}

BOOST_AUTO_TEST_SUITE_END()
