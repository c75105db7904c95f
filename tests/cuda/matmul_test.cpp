// Batched matmul through cuBLAS against the CPU GEMM in every layout the Backend contract allows:
// each operand stored or transposed in place, broadcast batch (stride 0), degenerate M/N/K = 1
// with arbitrary (even 0) leading dimensions, and rows broadcast with stride 0.
#include "engine/autocast.h"
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

namespace {

// A [B, rows, cols] operand in the requested layout, built from the same values on each device:
// transposed operands are views of a [B, cols, rows] tensor.
Tensor operand(const Tensor& values, bool transposed, bool broadcast_batch, int64_t batch) {
  Tensor t = transposed ? values.transpose(1, 2).contiguous().transpose(1, 2) : values;
  if (broadcast_batch) t = t.expand({batch, t.size(1), t.size(2)});
  return t;
}

void compare_matmul(int64_t batch, int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool ba,
                    bool bb, DType t, double tol) {
  Tensor a = random_tensor({ba ? 1 : batch, m, k}, t, -1, 1, 71);
  Tensor b = random_tensor({bb ? 1 : batch, k, n}, t, -1, 1, 72);
  Tensor want = Tensor::empty({batch, m, n}, t),
         got = Tensor::empty({batch, m, n}, t, Device::cuda());
  host().matmul(operand(a, ta, ba, batch), operand(b, tb, bb, batch), want);
  gpu().matmul(operand(on_gpu(a), ta, ba, batch), operand(on_gpu(b), tb, bb, batch), got);
  std::ostringstream what;
  what << dtype_name(t) << " B=" << batch << " M=" << m << " N=" << n << " K=" << k
       << (ta ? " A^T" : "") << (tb ? " B^T" : "") << (ba ? " A broadcast" : "")
       << (bb ? " B broadcast" : "");
  check_close(got, want, tol, what.str());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(matmul)

BOOST_AUTO_TEST_CASE(all_layouts_and_degenerate_sizes, *utf::precondition(gpu_present)) {
  struct Size {
    int64_t batch, m, n, k;
  };
  const Size sizes[] = {{3, 17, 23, 31}, {2, 1, 9, 5},  {2, 9, 1, 5},
                        {2, 6, 7, 1},    {1, 1, 1, 40}, {4, 64, 48, 80}};
  for (DType t : {DType::f32, DType::f64}) {
    // products accumulate over K in another order (and with FMA) than on the CPU; a layout
    // mistake gives errors of order 1
    const double tol = t == DType::f32 ? 1e-4 : 1e-12;
    for (const Size& s : sizes)
      for (int layout = 0; layout < 16; ++layout)
        compare_matmul(s.batch, s.m, s.n, s.k, layout & 1, layout & 2, layout & 4, layout & 8, t,
                       tol);
  }
}

BOOST_AUTO_TEST_CASE(zero_leading_dimensions_are_handled, *utf::precondition(gpu_present)) {
  // A's rows all alias one row (stride 0 between rows): no valid cuBLAS leading dimension exists
  Tensor row = random_tensor({1, 1, 8}, DType::f32, -1, 1, 73);
  Tensor b = random_tensor({2, 8, 5}, DType::f32, -1, 1, 74);
  Tensor want = Tensor::empty({2, 6, 5}),
         got = Tensor::empty({2, 6, 5}, DType::f32, Device::cuda());
  host().matmul(row.expand({2, 6, 8}), b, want);
  gpu().matmul(on_gpu(row).expand({2, 6, 8}), on_gpu(b), got);
  check_close(got, want, 1e-4, "A rows broadcast");
  // B broadcast along N (stride 0 between columns), read "transposed" with ld 0
  Tensor col = random_tensor({2, 8, 1}, DType::f32, -1, 1, 75);
  Tensor a = random_tensor({2, 6, 8}, DType::f32, -1, 1, 76);
  host().matmul(a, col.expand({2, 8, 5}), want);
  gpu().matmul(on_gpu(a), on_gpu(col).expand({2, 8, 5}), got);
  check_close(got, want, 1e-4, "B columns broadcast");
}

BOOST_AUTO_TEST_CASE(zero_depth_zeroes_a_padded_output, *utf::precondition(gpu_present)) {
  // k = 0: an empty sum. The output's rows are 5 wide inside rows of 8 (a narrowed view): the 5
  // become zeros, the 3 between them keep what they held.
  Tensor a = Tensor::empty({2, 3, 0}, DType::f32, Device::cuda());
  Tensor b = Tensor::empty({2, 0, 5}, DType::f32, Device::cuda());
  Tensor padded = on_gpu(full({2, 3, 8}, 7.0));
  gpu().matmul(a, b, padded.narrow(2, 0, 5));
  std::vector<double> got = padded.cpu().to_vector<double>();
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != (i % 8 < 5 ? 0.0 : 7.0);
  BOOST_TEST(wrong == 0);
}

BOOST_AUTO_TEST_CASE(the_matmul_op_folds_and_broadcasts, *utf::precondition(gpu_present)) {
  // through the op layer: a 2-D weight folds the batch into M; 4-D batches broadcast
  Tensor x = random_tensor({2, 3, 10, 16}, DType::f32, -1, 1, 77);
  Tensor w = random_tensor({16, 12}, DType::f32, -1, 1, 78);
  check_close(qkv::matmul(on_gpu(x), on_gpu(w)), qkv::matmul(x, w), 1e-4, "x @ w");
  check_close(qkv::matmul(on_gpu(x), on_gpu(w).transpose(0, 1).contiguous().transpose(0, 1)),
              qkv::matmul(x, w), 1e-4, "x @ w^T view");
  Tensor y = random_tensor({3, 16, 5}, DType::f32, -1, 1, 79);
  check_close(qkv::matmul(on_gpu(x), on_gpu(y)), qkv::matmul(x, y), 1e-4, "batch broadcast");
}

BOOST_AUTO_TEST_CASE(permuted_attention_heads_go_through_the_op, *utf::precondition(gpu_present)) {
  // q and k as attention makes them, [B, T, H, d] viewed as [B, H, T, d]: no single batch stride.
  // The CUDA backend takes 3-D operands only (one cuBLAS batch stride), so the op copies them.
  Tensor q = random_tensor({2, 7, 3, 8}, DType::f32, -1, 1, 83).permute({0, 2, 1, 3});
  Tensor k = random_tensor({2, 9, 3, 8}, DType::f32, -1, 1, 84).permute({0, 2, 1, 3});
  check_close(qkv::matmul(on_gpu(q), on_gpu(k).transpose(-1, -2)),
              qkv::matmul(q, k.transpose(-1, -2)), 1e-4, "q @ k^T over permuted heads");
  // and the backend says so when given the [B1, B2, rows, cols] grid the CPU backend takes
  BOOST_TEST(!gpu().supports_matmul_with_two_batch_dims());
  Tensor a = on_gpu(random_tensor({2, 3, 4, 5}, DType::f32, -1, 1, 85));
  Tensor b = on_gpu(random_tensor({2, 3, 5, 6}, DType::f32, -1, 1, 86));
  Tensor out = Tensor::empty({2, 3, 4, 6}, DType::f32, Device::cuda());
  try {
    gpu().matmul(a, b, out);
    BOOST_FAIL("the CUDA matmul took 4-D operands");
  } catch (const Error& e) {
    BOOST_TEST(std::string(e.what()).find("[batch, rows, cols]") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(linear_accumulates_onto_its_bias, *utf::precondition(gpu_present)) {
  // linear() asks the backend for the product plus the bias (matmul_plus_bias): CUDA's default
  // starts the output as the broadcast bias and accumulates the GEMM over it
  Tensor x = random_tensor({2, 7, 16}, DType::f32, -1, 1, 80);
  Tensor w = random_tensor({12, 16}, DType::f32, -1, 1, 81);
  Tensor b = random_tensor({12}, DType::f32, -1, 1, 82);
  check_close(qkv::linear(on_gpu(x), on_gpu(w), on_gpu(b)), qkv::linear(x, w, b), 1e-4,
              "linear with bias");
  check_close(qkv::linear(on_gpu(x), on_gpu(w)), qkv::linear(x, w), 1e-4, "linear without bias");
  // linear_relu: the default rectifies after the product, the CPU in its GEMM's epilogue
  check_close(qkv::linear_relu(on_gpu(x), on_gpu(w), on_gpu(b)), qkv::linear_relu(x, w, b), 1e-4,
              "linear_relu with bias");
  check_close(qkv::linear_relu(on_gpu(x), on_gpu(w)), qkv::linear_relu(x, w), 1e-4,
              "linear_relu without bias");
}

#ifdef QKV_WITH_CUDA
BOOST_AUTO_TEST_CASE(tf32_is_an_option_with_looser_accuracy, *utf::precondition(gpu_present)) {
  cuda::set_allow_tf32(true);
  // TF32 keeps 10 mantissa bits of each input: ~5e-4 relative error per product, a few percent
  // of the 1%-of-max floor after 256 products of random sign
  compare_matmul(2, 64, 64, 256, false, true, false, false, DType::f32, 1e-1);
  cuda::set_allow_tf32(false);
  compare_matmul(2, 64, 64, 256, false, true, false, false, DType::f32, 1e-4);
}
#endif

BOOST_AUTO_TEST_CASE(bf16_matmul_accumulates_in_float, *utf::precondition(gpu_present)) {
  Tensor a = random_tensor({2, 32, 64}, DType::bf16, -1, 1, 80);
  Tensor b = random_tensor({2, 64, 24}, DType::bf16, -1, 1, 81);
  Tensor want = Tensor::empty({2, 32, 24});
  host().matmul(a.to(DType::f32), b.to(DType::f32), want);  // exact inputs, float products
  Tensor got = Tensor::empty({2, 32, 24}, DType::bf16, Device::cuda());
  gpu().matmul(on_gpu(a), on_gpu(b), got);
  check_close(got.to(DType::f32), want, tolerance(DType::bf16), "bf16");
}

BOOST_AUTO_TEST_CASE(bf16_operands_give_a_float32_result, *utf::precondition(gpu_present)) {
  // Mixed precision's product (engine/autocast.h): bf16 in, float32 accumulated and returned.
  // Both sides multiply the same bf16 values exactly and sum them in float32 in different orders:
  // the float32 matmul tests' 1e-4 applies (a bf16 rounding mistake would show as ~1e-3).
  Tensor a = random_tensor({2, 48, 96}, DType::bf16, -1, 1, 82);
  Tensor b = random_tensor({2, 96, 40}, DType::bf16, -1, 1, 83);
  Tensor want = Tensor::empty({2, 48, 40}),
         got = Tensor::empty({2, 48, 40}, DType::f32, Device::cuda());
  host().matmul(a, b, want);
  gpu().matmul(on_gpu(a), on_gpu(b), got);
  check_close(got, want, 1e-4, "bf16 x bf16 -> float32");
}

BOOST_AUTO_TEST_CASE(autocast_linear_matches_the_cpu, *utf::precondition(gpu_present)) {
  // linear under Autocast(bf16), forward and backward, on both devices from the same values.
  Tensor x = random_tensor({6, 5, 64}, DType::f32, -1, 1, 84);
  Tensor w = random_tensor({32, 64}, DType::f32, -1, 1, 85);
  Tensor bias = random_tensor({32}, DType::f32, -1, 1, 86);
  Tensor g = random_tensor({6, 5, 32}, DType::f32, -1, 1, 87);
  auto run = [&](Device device) {
    // detach: on the CPU, to() returns the tensor itself, which must stay a constant
    Tensor xd = x.to(device).detach().requires_grad_();
    Tensor wd = w.to(device).detach().requires_grad_();
    Tensor bd = bias.to(device).detach().requires_grad_();
    Tensor y;
    {
      Autocast bf16(DType::bf16);
      y = linear(xd, wd, bd);
    }
    sum(mul(y, g.to(device))).backward();
    return std::vector<Tensor>{y.cpu(), xd.grad().cpu(), wd.grad().cpu(), bd.grad().cpu()};
  };
  const std::vector<Tensor> want = run(Device::cpu()), got = run(Device::cuda());
  const char* names[] = {"y", "dx", "dW", "db"};
  for (size_t i = 0; i < want.size(); ++i)
    check_close(got[i], want[i], 1e-4, names[i]);  // as above
}

BOOST_AUTO_TEST_SUITE_END()
