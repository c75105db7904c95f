// The fused flash-attention kernels against attention composed from qkv ops on the CPU in float64:
//   softmax(masked_fill(q k^T * scale, mask, -inf)) v, and its autograd gradients.
#include <cmath>
#include <limits>

#include "engine/autocast.h"
#include "tests/cuda/gpu_test_support.h"

#ifdef QKV_WITH_CUDA
#include "cuda/flash_attention.h"
#endif

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

namespace {

struct Case {
  int64_t batch, heads, tq, tk, d;
  bool causal, padding;
};

#ifdef QKV_WITH_CUDA

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "B=" << c.batch << " H=" << c.heads << " Tq=" << c.tq << " Tk=" << c.tk << " d=" << c.d
    << (c.causal ? " causal" : "") << (c.padding ? " padded" : "");
  return s.str();
}

// [B, Tk] key padding: batch 0 hides its last third of keys; batch 1 (if any) hides every key,
// so its queries see nothing and must get zeros.
Tensor padding_mask(const Case& c) {
  std::vector<double> v(c.batch * c.tk, 0.0);
  for (int64_t j = c.tk - c.tk / 3; j < c.tk; ++j) v[j] = 1;
  if (c.batch > 1)
    for (int64_t j = 0; j < c.tk; ++j) v[c.tk + j] = 1;
  return gt(tensor(v, {c.batch, c.tk}), 0.5);
}

// The [B, 1, Tq, Tk] boolean mask (true = hidden) the reference applies.
Tensor reference_mask(const Case& c, const Tensor& padding) {
  std::vector<double> v(c.batch * c.tq * c.tk, 0.0);
  const std::vector<double> pad =
      padding.defined() ? values_of(padding) : std::vector<double>(c.batch * c.tk, 0.0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < c.tq; ++i)
      for (int64_t j = 0; j < c.tk; ++j)
        v[(b * c.tq + i) * c.tk + j] = (c.causal && j > i) || pad[b * c.tk + j] ? 1 : 0;
  return gt(tensor(v, {c.batch, 1, c.tq, c.tk}), 0.5);
}

// max |got - want| <= tol * max |want|: for the bf16 kernels, whose rounding of P and dS gives
// errors of about 2^-9 of the largest values rather than of each element.
void check_close_to_max(const Tensor& got, const Tensor& want, double tol,
                        const std::string& what) {
  const std::vector<double> g = values_of(got), w = values_of(want);
  BOOST_REQUIRE_EQUAL(g.size(), w.size());
  double largest = 0, worst = 0;
  for (size_t i = 0; i < w.size(); ++i) largest = std::max(largest, std::abs(w[i]));
  for (size_t i = 0; i < w.size(); ++i) {
    const double err = std::isnan(g[i]) ? INFINITY : std::abs(g[i] - w[i]);
    worst = std::max(worst, err);
  }
  // (plus 1e-6 absolute: a gradient that is zero in exact arithmetic, as with a single key, comes
  // out as float32 sums that cancel)
  BOOST_CHECK_MESSAGE(worst <= tol * largest + 1e-6,
                      what << ": max error " << worst << " > " << tol << " * max " << largest);
}

// `tensor_cores`: the bf16 kernels (flash_attention_tc.cu), checked against the reference on
// bf16-rounded q, k and v with tolerances for their bf16 P and dS.
void check_against_reference(const Case& c, bool tensor_cores = false) {
  const std::string what = describe(c) + (tensor_cores ? " bf16" : "");
  const double scale = 1 / std::sqrt(double(c.d));
  // float32 inputs; the reference sees exactly the same values in float64
  Tensor q = random_tensor({c.batch, c.heads, c.tq, c.d}, DType::f32, -2, 2, 151);
  Tensor k = random_tensor({c.batch, c.heads, c.tk, c.d}, DType::f32, -2, 2, 152);
  Tensor v = random_tensor({c.batch, c.heads, c.tk, c.d}, DType::f32, -2, 2, 153);
  if (tensor_cores) {  // the kernels round these as they load them: give both sides bf16 values
    q = q.to(DType::bf16).to(DType::f32);
    k = k.to(DType::bf16).to(DType::f32);
    v = v.to(DType::bf16).to(DType::f32);
  }
  Tensor go = random_tensor({c.batch, c.heads, c.tq, c.d}, DType::f32, -1, 1, 154);
  Tensor pad = c.padding ? padding_mask(c) : Tensor();

  // reference, with autograd for the gradients
  Tensor q64 = q.to(DType::f64).detach().requires_grad_(),
         k64 = k.to(DType::f64).detach().requires_grad_(),
         v64 = v.to(DType::f64).detach().requires_grad_();
  Tensor scores = qkv::matmul(q64, k64.transpose(-1, -2)) * scale;
  scores = masked_fill(scores, reference_mask(c, pad), -std::numeric_limits<double>::infinity());
  Tensor out_ref = qkv::matmul(softmax(scores, -1), v64);
  sum(out_ref * go.to(DType::f64)).backward();

  // the kernels
  const Device dev = Device::cuda();
  Tensor qg = on_gpu(q), kg = on_gpu(k), vg = on_gpu(v), gog = on_gpu(go);
  Tensor padg = pad.defined() ? on_gpu(pad) : Tensor();
  Tensor out = Tensor::empty(q.shape(), DType::f32, dev);
  Tensor lse = Tensor::empty({c.batch, c.heads, c.tq}, DType::f32, dev);
  Tensor gq = Tensor::empty(q.shape(), DType::f32, dev),
         gk = Tensor::empty(k.shape(), DType::f32, dev),
         gv = Tensor::empty(v.shape(), DType::f32, dev);
  if (tensor_cores) {
    cuda::flash_attention_forward_bf16(qg, kg, vg, padg, c.causal, scale, out, lse);
    cuda::flash_attention_backward_bf16(qg, kg, vg, padg, c.causal, scale, out, lse, gog, gq, gk,
                                        gv);
    // P rounded to bf16 (2^-9 relative) over ~100 keys: measured errors belong in docs/CUDA.md
    check_close_to_max(out, out_ref.detach(), 2e-2, what + " out");
    check_close_to_max(gq, q64.grad(), 3e-2, what + " grad q");
    check_close_to_max(gk, k64.grad(), 3e-2, what + " grad k");
    check_close_to_max(gv, v64.grad(), 3e-2, what + " grad v");
  } else {
    cuda::flash_attention_forward(qg, kg, vg, padg, c.causal, scale, out, lse);
    cuda::flash_attention_backward(qg, kg, vg, padg, c.causal, scale, out, lse, gog, gq, gk, gv);
    // float32 sums over ~100 keys against the 1%-of-max floor: up to 3.5e-5 in an emulation of
    // the kernel on the CPU, so 1e-4 (the gradients' bound too)
    check_close(out, out_ref.detach(), 1e-4, what + " out");
    check_close(gq, q64.grad(), 1e-4, what + " grad q");
    check_close(gk, k64.grad(), 1e-4, what + " grad k");
    check_close(gv, v64.grad(), 1e-4, what + " grad v");
  }

  // lse: log-sum-exp of each row's visible scores, -inf where none is visible
  const std::vector<double> s = values_of(scores.detach());
  std::vector<double> want(c.batch * c.heads * c.tq);
  for (size_t r = 0; r < want.size(); ++r) {
    double m = -std::numeric_limits<double>::infinity(), total = 0;
    for (int64_t j = 0; j < c.tk; ++j) m = std::max(m, s[r * c.tk + j]);
    for (int64_t j = 0; j < c.tk && std::isfinite(m); ++j) total += std::exp(s[r * c.tk + j] - m);
    want[r] = std::isfinite(m) ? m + std::log(total) : m;
  }
  // float32 scores, expf and logf: up to 2.4e-6 in an emulation on the CPU, so 1e-5
  check_close(lse, tensor(want, {c.batch, c.heads, c.tq}), 1e-5, what + " lse");
}

#else  // the tests are skipped before they get here

void check_against_reference(const Case&, bool = false) {
  BOOST_FAIL("flash attention needs a CUDA build");
}

#endif

}  // namespace

BOOST_AUTO_TEST_SUITE(flash_attention)

BOOST_AUTO_TEST_CASE(matches_composed_attention_with_every_mask, *utf::precondition(gpu_present)) {
  for (bool causal : {false, true})
    for (bool padding : {false, true})
      check_against_reference({2, 3, 100, 100, 64, causal, padding});
}

BOOST_AUTO_TEST_CASE(every_head_width_and_unequal_lengths, *utf::precondition(gpu_present)) {
  check_against_reference({1, 2, 37, 37, 16, true, false});    // DMAX 32, partial tiles
  check_against_reference({2, 1, 70, 130, 80, false, true});   // DMAX 128, Tq < Tk
  check_against_reference({1, 2, 130, 70, 128, true, false});  // Tq > Tk
  check_against_reference({1, 1, 1, 1, 1, false, false});      // a single key
  check_against_reference({3, 2, 200, 200, 32, true, true});   // fully masked batch, causal
}

BOOST_AUTO_TEST_CASE(tensor_core_kernels_match_with_every_mask, *utf::precondition(gpu_present)) {
  for (bool causal : {false, true})
    for (bool padding : {false, true})
      check_against_reference({2, 3, 100, 100, 64, causal, padding}, true);
  check_against_reference({1, 2, 37, 37, 16, true, false}, true);     // d padded to 64
  check_against_reference({2, 1, 70, 130, 80, false, true}, true);    // D 128, Tq < Tk
  check_against_reference({1, 2, 130, 70, 128, true, false}, true);   // Tq > Tk, several tiles
  check_against_reference({1, 2, 256, 192, 128, false, true}, true);  // D 128, 4 x 2 full blocks
  check_against_reference({1, 1, 1, 1, 1, false, false}, true);       // a single key
  check_against_reference({3, 2, 200, 200, 32, true, true}, true);    // fully masked batch
}

BOOST_AUTO_TEST_CASE(autocast_bf16_selects_the_tensor_core_kernels,
                     *utf::precondition(gpu_present)) {
#ifdef QKV_WITH_CUDA
  // The backend hook runs the bf16 kernels under Autocast(bf16) and the float32 ones otherwise;
  // both are deterministic (no atomics), so the outputs must match bit for bit.
  const Device dev = Device::cuda();
  Tensor q = on_gpu(random_tensor({1, 2, 96, 64}, DType::f32, -2, 2, 160));
  Tensor k = on_gpu(random_tensor({1, 2, 96, 64}, DType::f32, -2, 2, 161));
  auto run = [&](DType precision, bool direct_bf16) {
    Tensor out = Tensor::empty(q.shape(), DType::f32, dev),
           lse = Tensor::empty({1, 2, 96}, DType::f32, dev);
    if (direct_bf16) {
      cuda::flash_attention_forward_bf16(q, k, k, Tensor(), true, 0.125, out, lse);
    } else {
      Autocast scope(precision);
      backend_for(dev).fused_attention_forward(q, k, k, Tensor(), true, 0.125, out, lse);
    }
    return values_of(out);
  };
  const auto bf16_hook = run(DType::bf16, false), bf16_direct = run(DType::bf16, true);
  const auto f32_hook = run(DType::f32, false);
  BOOST_CHECK(bf16_hook == bf16_direct);
  BOOST_CHECK(bf16_hook != f32_hook);
#endif
}

BOOST_AUTO_TEST_CASE(no_keys_give_zero_output_and_no_gradient, *utf::precondition(gpu_present)) {
#ifdef QKV_WITH_CUDA
  // Tk = 0: every query sees nothing, as in a fully padded row - zeros, lse -inf, zero dQ. The
  // forward kernels then skip their key loop, so this is where they read the zeroed accumulator
  // straight after the barrier that follows zeroing it.
  const Device dev = Device::cuda();
  Tensor q = on_gpu(random_tensor({1, 2, 70, 16}, DType::f32, -2, 2, 170));
  Tensor kv = Tensor::empty({1, 2, 0, 16}, DType::f32, dev);
  for (bool tensor_cores : {false, true}) {
    BOOST_TEST_CONTEXT((tensor_cores ? "bf16 tensor cores" : "float32")) {
      Tensor out = Tensor::empty(q.shape(), DType::f32, dev),
             lse = Tensor::empty({1, 2, 70}, DType::f32, dev);
      (tensor_cores ? cuda::flash_attention_forward_bf16 : cuda::flash_attention_forward)(
          q, kv, kv, Tensor(), false, 0.25, out, lse);
      for (double v : values_of(out)) BOOST_TEST(v == 0.0);
      for (double v : values_of(lse)) BOOST_TEST((std::isinf(v) && v < 0));
      Tensor gq = Tensor::empty(q.shape(), DType::f32, dev);
      Tensor gk = Tensor::empty(kv.shape(), DType::f32, dev), gv = gk.clone();
      Tensor go = on_gpu(random_tensor(q.shape(), DType::f32, -1, 1, 171));
      (tensor_cores ? cuda::flash_attention_backward_bf16 : cuda::flash_attention_backward)(
          q, kv, kv, Tensor(), false, 0.25, out, lse, go, gq, gk, gv);
      for (double v : values_of(gq)) BOOST_TEST(v == 0.0);
    }
  }
#endif
}

BOOST_AUTO_TEST_CASE(rejects_bad_shapes, *utf::precondition(gpu_present)) {
#ifdef QKV_WITH_CUDA
  const Device dev = Device::cuda();
  Tensor q = Tensor::empty({1, 2, 8, 200}, DType::f32, dev);  // d > 128
  Tensor out = Tensor::empty(q.shape(), DType::f32, dev),
         lse = Tensor::empty({1, 2, 8}, DType::f32, dev);
  BOOST_CHECK_THROW(cuda::flash_attention_forward(q, q, q, Tensor(), false, 1, out, lse), Error);
  Tensor q64 = Tensor::empty({1, 2, 8, 16}, DType::f64, dev);
  BOOST_CHECK_THROW(cuda::flash_attention_forward(q64, q64, q64, Tensor(), false, 1, q64, lse),
                    Error);
#endif
}

BOOST_AUTO_TEST_SUITE_END()
