// Memory-saving paths against the plain ones: gradient checkpointing, the memory-efficient
// attention kernel, and its sparse / local patterns. Each must give the plain path's numbers, and
// the memory claims are measured with the CPU allocator's peak counter.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/backend.h"
#include "nn/checkpoint.h"
#include "nn/efficient_attention.h"
#include "nn/transformer.h"

using namespace qkv;
using namespace qkv::nn;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  BOOST_REQUIRE_EQUAL(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

Backend& cpu() { return backend_for(Device::cpu()); }

// Peak bytes allocated while fn runs, above what was in use when it started.
template <typename F>
size_t peak_during(F&& fn) {
  size_t base = cpu().memory_stats().bytes_in_use;
  cpu().reset_peak_memory();
  fn();
  return cpu().memory_stats().peak_bytes - base;
}

// Parameter gradients of one training step of `enc` (dropout on), after seeding the generator.
std::vector<Tensor> encoder_step(TransformerEncoder& enc, const Tensor& x, const Tensor& pad) {
  manual_seed(7);
  enc.zero_grad();
  Tensor xin = x.detach();
  xin.requires_grad_(true);
  sum(square(enc.forward(xin, pad))).backward();
  std::vector<Tensor> g;
  for (const Tensor& p : enc.parameters()) g.push_back(p.grad());
  g.push_back(xin.grad());
  return g;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(memory)

BOOST_AUTO_TEST_CASE(checkpointed_encoder_has_identical_gradients_and_lower_peak) {
  TransformerLayerOptions o;
  o.d_model = 32, o.num_heads = 4, o.dim_feedforward = 128, o.dropout = 0.2;
  manual_seed(1);
  TransformerEncoder plain(o, 4);
  o.checkpoint_activations = true;
  TransformerEncoder ckpt(o, 4);
  ckpt.load_state_dict(plain.state_dict());
  Tensor x = randn({4, 48, 32});
  Tensor pad = zeros({4, 48}).to(DType::b8);
  std::vector<Tensor> a, b;
  size_t peak_plain = peak_during([&] { a = encoder_step(plain, x, pad); });
  size_t peak_ckpt = peak_during([&] { b = encoder_step(ckpt, x, pad); });
  // Dropout is on: equal gradients mean the recomputation replayed the same masks.
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) BOOST_CHECK_LT(max_abs_diff(a[i], b[i]), 1e-5);
  BOOST_TEST_MESSAGE("encoder peak: plain " << peak_plain << " B, checkpointed " << peak_ckpt);
  BOOST_CHECK_LT(double(peak_ckpt), 0.6 * double(peak_plain));
}

BOOST_AUTO_TEST_CASE(efficient_attention_equals_naive_with_masks_forward_and_backward) {
  // 150 queries/keys: two full 64-tiles and a partial one; key padding read through broadcast
  // strides, plus causal.
  manual_seed(3);
  const int64_t B = 2, H = 3, T = 150, d = 16;
  Tensor q = randn({B, H, T, d}), k = randn({B, H, T, d}), v = randn({B, H, T, d});
  std::vector<double> padv(size_t(B * T), 0.0);
  for (int64_t s = 130; s < T; ++s) padv[size_t(T + s)] = 1;  // second sequence padded
  Tensor pad = tensor(padv, {B, 1, 1, T}).to(DType::b8);
  for (const Tensor* t : {&q, &k, &v}) const_cast<Tensor*>(t)->requires_grad_(true);
  Tensor gy = randn({B, H, T, d});

  auto run = [&](bool efficient) {
    Tensor o = efficient ? [&] {
      AttentionPattern p;
      p.causal = true;
      return efficient_attention(q, k, v, {pad}, p);
    }()
                         : scaled_dot_product_attention(q, k, v, pad, true).output;
    std::vector<Tensor> g = grad(sum(mul(o, gy)), {q, k, v});
    g.insert(g.begin(), o.detach());
    return g;
  };
  std::vector<Tensor> naive = run(false), fast = run(true);
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i)
    BOOST_CHECK_MESSAGE(max_abs_diff(naive[i], fast[i]) < 2e-5,
                        names[i] << " differs by " << max_abs_diff(naive[i], fast[i]));
  // sdpa chooses the efficient kernel by itself when no weights are wanted.
  AttentionOutput auto_pick = scaled_dot_product_attention(q, k, v, pad, true, 0.0, {}, false);
  BOOST_CHECK(!auto_pick.weights.defined());
  BOOST_CHECK_LT(max_abs_diff(auto_pick.output, naive[0]), 2e-5);
}

BOOST_AUTO_TEST_CASE(efficient_attention_with_dropout_drops_what_the_naive_one_drops) {
  // The kernel draws each tile row's dropout mask where it uses it (and again in backward); from
  // the same generator state it must drop the very weights dropout() on the naive weights drops,
  // and leave the generator where that does. 150 keys: rows straddle three key tiles.
  manual_seed(4);
  const int64_t B = 2, H = 3, T = 150, d = 16;
  const double p = 0.3;
  Tensor q = randn({B, H, T, d}), k = randn({B, H, T, d}), v = randn({B, H, T, d});
  std::vector<double> padv(size_t(B * T), 0.0);
  for (int64_t s = 120; s < T; ++s) padv[size_t(s)] = 1;  // first sequence padded
  Tensor pad = tensor(padv, {B, 1, 1, T}).to(DType::b8);
  for (const Tensor* t : {&q, &k, &v}) const_cast<Tensor*>(t)->requires_grad_(true);
  Tensor gy = randn({B, H, T, d});

  uint64_t offset_after[2];
  auto run = [&](bool efficient, double drop) {
    manual_seed(21);
    Tensor o = efficient ? [&] {
      AttentionPattern causal;
      causal.causal = true;
      return efficient_attention(q, k, v, {pad}, causal, -1, drop);
    }()
                         : scaled_dot_product_attention(q, k, v, pad, true, drop).output;
    offset_after[efficient] = default_generator().offset();
    std::vector<Tensor> g = grad(sum(mul(o, gy)), {q, k, v});
    g.insert(g.begin(), o.detach());
    return g;
  };
  std::vector<Tensor> naive = run(false, p), fast = run(true, p);
  BOOST_TEST(offset_after[0] == offset_after[1]);
  BOOST_TEST(offset_after[0] == uint64_t(B * H * T * T));  // a fill of the [B, H, T, T] weights
  std::vector<Tensor> undropped = run(true, 0.0);
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i)
    BOOST_CHECK_MESSAGE(max_abs_diff(naive[i], fast[i]) < 2e-5,
                        names[i] << " differs by " << max_abs_diff(naive[i], fast[i]));
  BOOST_TEST(max_abs_diff(fast[0], undropped[0]) > 0.1);  // the dropout did something
  // sdpa takes the efficient kernel by itself when no weights are wanted, dropout or not.
  manual_seed(21);
  AttentionOutput auto_pick = scaled_dot_product_attention(q, k, v, pad, true, p, {}, false);
  BOOST_CHECK(!auto_pick.weights.defined());
  BOOST_CHECK_LT(max_abs_diff(auto_pick.output, naive[0]), 2e-5);
}

BOOST_AUTO_TEST_CASE(efficient_attention_peak_memory_grows_linearly) {
  NoGrad no_grad;  // forward only: the naive one holds [H, T, T] scores, the efficient one not
  for (double drop : {0.0, 0.1}) {  // with dropout the naive one holds a [H, T, T] mask too
    auto measure = [drop](int64_t T, bool efficient) {
      Tensor q = randn({1, 4, T, 32}), k = randn({1, 4, T, 32}), v = randn({1, 4, T, 32});
      return peak_during([&] {
        Tensor o = scaled_dot_product_attention(q, k, v, {}, false, drop, {}, !efficient).output;
      });
    };
    size_t e512 = measure(512, true), e1024 = measure(1024, true);
    size_t n1024 = measure(1024, false);
    BOOST_TEST_MESSAGE("dropout " << drop << ", peak: efficient T=512 " << e512 << ", T=1024 "
                                  << e1024 << "; naive T=1024 " << n1024);
    BOOST_CHECK_LT(double(e1024), 2.5 * double(e512));  // linear: doubling T about doubles it
    BOOST_CHECK_GE(e1024, size_t(4 * 1024 * 32 * 4));   // at least the output itself
    BOOST_CHECK_LT(double(e1024) * 8, double(n1024));   // the T x T scores alone are 16 MiB
  }
}

BOOST_AUTO_TEST_CASE(efficient_attention_reads_heads_in_place) {
  // q, k, v as MultiheadAttention makes them: [B, T, H, d] viewed as [B, H, T, d]. The kernel
  // reads them through their strides, so its forward allocates its output and log-sum-exps only,
  // not three contiguous copies of 0.5 MiB each, and gives the contiguous operands' numbers. The
  // output and the gradients come laid out as [B, T, H, d], so the layer's [B, T, H * d] views of
  // them need no copy either.
  const int64_t B = 2, T = 256, H = 4, d = 64;
  Tensor x = randn({B, T, H, d}), y = randn({B, T, H, d}), z = randn({B, T, H, d});
  for (const Tensor* t : {&x, &y, &z}) const_cast<Tensor*>(t)->requires_grad_(true);
  auto heads = [](const Tensor& t) { return t.permute({0, 2, 1, 3}); };
  Tensor o;
  {
    NoGrad no_grad;
    const size_t peak = peak_during([&] { o = efficient_attention(heads(x), heads(y), heads(z)); });
    const size_t output_bytes = size_t(B * H * T * d) * sizeof(float);
    BOOST_TEST_MESSAGE("peak " << peak << " B, output " << output_bytes << " B");
    BOOST_CHECK_LT(double(peak), 1.5 * double(output_bytes));
    Tensor want =
        efficient_attention(heads(x).contiguous(), heads(y).contiguous(), heads(z).contiguous());
    BOOST_CHECK_LT(max_abs_diff(o, want), 1e-6);
  }
  BOOST_CHECK(o.transpose(1, 2).is_contiguous());  // [B, T, H, d] in memory
  sum(efficient_attention(heads(x), heads(y), heads(z))).backward();
  for (const Tensor* t : {&x, &y, &z}) BOOST_CHECK(t->grad().is_contiguous());
}

BOOST_AUTO_TEST_CASE(local_and_block_sparse_attention_equal_the_dense_masked_version) {
  manual_seed(5);
  const int64_t T = 200;
  for (int kind = 0; kind < 2; ++kind) {
    MultiheadAttention mha(32, 4);
    mha.eval();
    if (kind == 0) {
      mha.pattern.window = 20;  // most of the 64-tiles lie outside the band and are skipped
    } else {
      mha.pattern.block_size = 32;
      mha.pattern.block_layout = band_block_layout(T, T, 32, 1, 1);
    }
    Tensor x = randn({2, T, 32});
    x.requires_grad_(true);
    Tensor gy = randn({2, T, 32});
    // need_weights = true takes the naive kernel with the pattern spelled out as a dense mask.
    Tensor dense = mha.forward(x, x, x, {}, {}, true, true, true).output;
    Tensor gdense = grad(sum(mul(dense, gy)), {x})[0];
    Tensor sparse = mha.forward(x, x, x, {}, {}, false, true, true).output;
    Tensor gsparse = grad(sum(mul(sparse, gy)), {x})[0];
    BOOST_CHECK_LT(max_abs_diff(dense, sparse), 2e-5);
    BOOST_CHECK_LT(max_abs_diff(gdense, gsparse), 1e-4);
  }
  // The dense mask of a window: exactly |t - s| > w blocked.
  AttentionPattern p;
  p.window = 1;
  std::vector<double> m = pattern_mask(p, 3, 4).to_vector<double>();
  BOOST_CHECK((m == std::vector<double>{0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0}));
}

BOOST_AUTO_TEST_SUITE_END()
