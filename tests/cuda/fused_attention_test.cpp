// Attention on CUDA through nn: scaled_dot_product_attention and MultiheadAttention with CUDA
// tensors against the same calls on the CPU, forward and the q/k/v gradients, for each mask form
// the transformer builds (none, causal, key padding, both, cross-attention with Tq != Tk, masks
// varying over heads, 3-D operands). Each case also checks which route ran: the fused kernel
// records "efficient_attention" and no "softmax"; operands it cannot take (an arbitrary [T, S]
// mask, a head width above 128) must fall back to the composed attention and still agree.
//
// Tolerances: both sides compute in float32 in different orders (CPU: packed GEMM tiles; GPU: one
// thread's sequential dot products, expf). Against a float64 reference the flash kernels are
// within 2e-5 (outputs) and 1e-4 (gradients) in flash_attention_test's normalized error, and the
// CPU kernel is at least as close, so GPU vs CPU gets twice that; MultiheadAttention adds four
// projections through cuBLAS vs the CPU GEMM (each ~1e-6), hence the looser module bounds.
#include <algorithm>
#include <functional>
#include <string>

#include "engine/autograd.h"
#include "nn/attention.h"
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

namespace {

enum class Route { fused, composed };

#ifdef QKV_WITH_CUDA

constexpr double kOutTol = 1e-4, kGradTol = 2e-4;  // one attention (d = 128: 3.5e-5 measured)
constexpr double kModuleOutTol = 1e-4, kModuleGradTol = 5e-4;  // MultiheadAttention

double max_abs(const Tensor& t) {
  double largest = 0;
  for (double v : values_of(t)) largest = std::max(largest, std::abs(v));
  return largest;
}

bool recorded(const std::vector<std::string>& ops, const std::string& op) {
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

// The fused kernel on separate q, k, v or on self-attention's packed projection.
bool fused_ran(const std::vector<std::string>& ops) {
  return recorded(ops, "efficient_attention") || recorded(ops, "efficient_attention_packed");
}

void check_route(const std::vector<std::string>& ops, Route route, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    if (route == Route::fused) {
      BOOST_TEST(fused_ran(ops), "the fused kernel did not run");
      BOOST_TEST(!recorded(ops, "softmax"), "attention was composed from engine ops");
    } else {
      BOOST_TEST(!fused_ran(ops), "the fused kernel ran");
      BOOST_TEST(recorded(ops, "softmax"), "attention was not composed from engine ops");
    }
  }
}

struct Result {
  Tensor out;
  std::vector<Tensor> grads;     // of the inputs, on the CPU
  std::vector<std::string> ops;  // recorded while it ran
};

// Runs f on copies of `inputs` on `device` (leaves requiring gradients) and `masks` (no
// gradient), then backward of sum(out * weight): a weighted sum, so every output element's
// gradient differs.
Result run_on(
    Device device, const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks,
    const std::function<Tensor(const std::vector<Tensor>&, const std::vector<Tensor>&)>& f) {
  std::vector<Tensor> leaves, moved_masks;
  for (const Tensor& t : inputs) leaves.push_back(t.to(device).detach().requires_grad_());
  for (const Tensor& m : masks) moved_masks.push_back(m.defined() ? m.to(device) : Tensor());
  Result r;
  RecordedOps trace;
  Tensor out = f(leaves, moved_masks);
  const Tensor weight = random_tensor(out.shape(), DType::f32, -1, 1, 901).to(device);
  sum(mul(out, weight)).backward();
  r.ops = trace.names();
  r.out = on_cpu(out.detach());
  for (const Tensor& l : leaves) r.grads.push_back(on_cpu(l.grad()));
  return r;
}

void compare(const Result& gpu_result, const Result& cpu_result, double out_tol, double grad_tol,
             const std::string& what) {
  check_close(gpu_result.out, cpu_result.out, out_tol, what + " output");
  for (size_t i = 0; i < cpu_result.grads.size(); ++i)
    check_close(gpu_result.grads[i], cpu_result.grads[i], grad_tol,
                what + " gradient of input " + std::to_string(i));
}

// [B, S] key padding: batch 0 hides its last quarter, batch 1 (if any) its first key and every
// odd one, the last batch (if there are 3 or more) every key - its queries see nothing.
Tensor key_padding(int64_t B, int64_t S) {
  std::vector<double> v(size_t(B * S), 0.0);
  for (int64_t s = S - S / 4; s < S; ++s) v[size_t(s)] = 1;
  if (B > 1)
    for (int64_t s = 0; s < S; ++s) v[size_t(S + s)] = (s == 0 || s % 2 == 1) ? 1 : 0;
  if (B > 2)
    for (int64_t s = 0; s < S; ++s) v[size_t((B - 1) * S + s)] = 1;
  return gt(tensor(v, {B, S}), 0.5);
}

struct SdpaCase {
  std::string name;
  Shape q, k;                // [..., T, d] and [..., S, d]; v is shaped like k
  std::vector<Tensor> mask;  // zero or one bool attn_mask
  bool causal;
  Route route;
};

void check_sdpa(const SdpaCase& c) {
  const Tensor q = random_tensor(c.q, DType::f32, -2, 2, 911);
  const Tensor k = random_tensor(c.k, DType::f32, -2, 2, 912);
  const Tensor v = random_tensor(c.k, DType::f32, -2, 2, 913);
  auto f = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& m) {
    return nn::scaled_dot_product_attention(x[0], x[1], x[2], m.empty() ? Tensor() : m[0], c.causal,
                                            0.0, std::nullopt, false)
        .output;
  };
  const Result want = run_on(Device::cpu(), {q, k, v}, c.mask, f);
  const Result got = run_on(Device::cuda(), {q, k, v}, c.mask, f);
  check_route(got.ops, c.route, c.name);
  compare(got, want, kOutTol, kGradTol, c.name);
}

#endif

}  // namespace

BOOST_AUTO_TEST_SUITE(fused_attention)

BOOST_AUTO_TEST_CASE(sdpa_takes_the_fused_kernel_for_every_expressible_mask,
                     *utf::precondition(gpu_present)) {
#ifdef QKV_WITH_CUDA
  const int64_t B = 3, H = 2, T = 37, S = 45, d = 16;
  const Tensor pad = key_padding(B, T).reshape({B, 1, 1, T});
  const Tensor cross_pad = key_padding(B, S).reshape({B, 1, 1, S});
  std::vector<double> per_head_values(size_t(B * H * T), 0.0);
  for (size_t i = 0; i < per_head_values.size(); i += 3) per_head_values[i] = 1;
  const Tensor per_head = gt(tensor(per_head_values, {B, H, 1, T}), 0.5);
  const std::vector<SdpaCase> cases = {
      {"no mask", {B, H, T, d}, {B, H, T, d}, {}, false, Route::fused},
      {"causal", {B, H, T, d}, {B, H, T, d}, {}, true, Route::fused},
      {"key padding", {B, H, T, d}, {B, H, T, d}, {pad}, false, Route::fused},
      {"key padding + causal", {B, H, T, d}, {B, H, T, d}, {pad}, true, Route::fused},
      {"cross, Tq < Tk, key padding", {B, H, T, d}, {B, H, S, d}, {cross_pad}, false, Route::fused},
      {"Tq > Tk, causal", {B, H, S, d}, {B, H, T, d}, {}, true, Route::fused},
      {"mask varying over heads", {B, H, T, d}, {B, H, T, d}, {per_head}, true, Route::fused},
      {"3-D, [N, 1, S] mask",
       {B, T, 32},
       {B, S, 32},
       {key_padding(B, S).reshape({B, 1, S})},
       false,
       Route::fused},
      {"head width 128", {1, 2, 70, 128}, {1, 2, 70, 128}, {}, true, Route::fused},
      // not expressible as (key padding, causal), or beyond the kernel: composed attention
      {"arbitrary [T, S] mask",
       {B, H, T, d},
       {B, H, T, d},
       {random_tensor({T, T}, DType::b8, 0, 1, 914)},
       false,
       Route::composed},
      {"causal mask as a tensor",
       {B, H, T, d},
       {B, H, T, d},
       {nn::causal_mask(T)},
       false,
       Route::composed},
      {"head width 160", {1, 2, 20, 160}, {1, 2, 20, 160}, {}, false, Route::composed},
  };
  for (const SdpaCase& c : cases) check_sdpa(c);
#endif
}

// The three attentions of a transformer: encoder self-attention with key padding, decoder
// self-attention (causal) with padding, cross-attention to a longer memory with its padding.
// One module, its weights copied to the GPU; the inputs' and the projections' gradients compared.
BOOST_AUTO_TEST_CASE(multihead_attention_matches_the_cpu_on_the_fused_kernel,
                     *utf::precondition(gpu_present)) {
#ifdef QKV_WITH_CUDA
  const int64_t B = 3, T = 19, S = 27, E = 64, H = 4;
  manual_seed(7);
  auto cpu_attention = std::make_shared<nn::MultiheadAttention>(E, H, 0.0);
  auto gpu_attention = std::make_shared<nn::MultiheadAttention>(E, H, 0.0);
  gpu_attention->load_state_dict(cpu_attention->state_dict());
  gpu_attention->to(Device::cuda());
  const Tensor x = random_tensor({B, T, E}, DType::f32, -1, 1, 921);
  const Tensor memory = random_tensor({B, S, E}, DType::f32, -1, 1, 922);

  struct ModuleCase {
    std::string name;
    bool cross, causal;
  };
  for (const ModuleCase& c : {ModuleCase{"encoder self-attention, key padding", false, false},
                              ModuleCase{"decoder self-attention, causal + padding", false, true},
                              ModuleCase{"cross-attention, memory padding", true, false}}) {
    const Tensor pad = key_padding(B, c.cross ? S : T);
    auto forward_with = [&c](nn::MultiheadAttention* attention) {
      return [&c, attention](const std::vector<Tensor>& in, const std::vector<Tensor>& m) {
        const Tensor& kv = c.cross ? in[1] : in[0];
        return attention->forward(in[0], kv, kv, m[0], Tensor(), false, true, c.causal).output;
      };
    };
    const std::vector<Tensor> inputs =
        c.cross ? std::vector<Tensor>{x, memory} : std::vector<Tensor>{x};
    cpu_attention->zero_grad();
    gpu_attention->zero_grad();
    const Result want = run_on(Device::cpu(), inputs, {pad}, forward_with(cpu_attention.get()));
    const Result got = run_on(Device::cuda(), inputs, {pad}, forward_with(gpu_attention.get()));
    check_route(got.ops, Route::fused, c.name);
    compare(got, want, kModuleOutTol, kModuleGradTol, c.name);
    const auto cpu_parameters = cpu_attention->named_parameters();
    const auto gpu_parameters = gpu_attention->named_parameters();
    BOOST_REQUIRE_EQUAL(cpu_parameters.size(), gpu_parameters.size());
    for (size_t i = 0; i < cpu_parameters.size(); ++i) {
      const std::string& name = cpu_parameters[i].first;
      const Tensor got_grad = on_cpu(gpu_parameters[i].second.grad());
      if (name == "k_proj.bias") {
        // Zero in exact arithmetic: a bias added to every key shifts all of a query's scores by
        // the same amount, which the softmax ignores. Both sides hold rounding noise (the fused
        // backward's larger: its delta_i is dO_i . O_i, not sum_j p_ij dp_ij), so each must be
        // small next to the key weights' gradient rather than equal to the other.
        const double noise = max_abs(got_grad),
                     cpu_noise = max_abs(cpu_parameters[i].second.grad());
        const auto weight = std::find_if(cpu_parameters.begin(), cpu_parameters.end(),
                                         [](const auto& p) { return p.first == "k_proj.weight"; });
        BOOST_REQUIRE(weight != cpu_parameters.end());
        const double reference = max_abs(weight->second.grad());
        BOOST_TEST(noise <= 1e-4 * reference, c.name << ": k_proj.bias gradient " << noise);
        BOOST_TEST(cpu_noise <= 1e-4 * reference,
                   c.name << ": CPU k_proj.bias gradient " << cpu_noise);
        continue;
      }
      check_close(got_grad, cpu_parameters[i].second.grad(), kModuleGradTol,
                  c.name + " gradient of " + name);
    }
  }
#endif
}

BOOST_AUTO_TEST_SUITE_END()
