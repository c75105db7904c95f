// Layers against direct computations: convolution by nested loops, pooling by hand, BatchNorm's
// running statistics, SE/CBAM by their definitions, losses by their formulas.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/backend.h"
#include "engine/profiler.h"
#include "nn/batch_norm.h"
#include "nn/channel_attention.h"
#include "nn/conv.h"
#include "nn/feed_forward.h"
#include "nn/loss.h"
#include "nn/pooling.h"
#include "nn/residual_block.h"
#include "nn/transformer.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::check_error;
using qkv::testing::check_values;

BOOST_AUTO_TEST_SUITE(layers)

BOOST_AUTO_TEST_CASE(conv2d_equals_nested_loops) {
  manual_seed(11);
  const int64_t B = 2, C = 4, H = 6, W = 5, O = 6, K = 3, S = 2, P = 1, G = 2;
  Tensor x = randn({B, C, H, W}), w = randn({O, C / G, K, K}), b = randn({O});
  Tensor y = conv2d(x, w, b, S, P, G);
  const int64_t Ho = (H + 2 * P - K) / S + 1, Wo = (W + 2 * P - K) / S + 1;
  BOOST_REQUIRE(y.shape() == (Shape{B, O, Ho, Wo}));
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> expected;
  for (int64_t n = 0; n < B; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double acc = bv[o];
          int64_t g = o / (O / G);
          for (int64_t c = 0; c < C / G; ++c)
            for (int64_t ki = 0; ki < K; ++ki)
              for (int64_t kj = 0; kj < K; ++kj) {
                int64_t r = i * S - P + ki, q = j * S - P + kj;
                if (r < 0 || r >= H || q < 0 || q >= W) continue;
                acc += xv[((n * C + g * (C / G) + c) * H + r) * W + q] *
                       wv[((o * (C / G) + c) * K + ki) * K + kj];
              }
          expected.push_back(acc);
        }
  check_values(y, expected, 1e-4);
  check_error([&] { conv2d(x, randn({O, 3, K, K})); }, {"conv2d", "do not agree"});
}

BOOST_AUTO_TEST_CASE(pooling_by_hand) {
  Tensor x = arange(0, 16, 1).reshape({1, 1, 4, 4});
  check_values(max_pool2d(x, 2), {5, 7, 13, 15});
  check_values(avg_pool2d(x, 2), {2.5, 4.5, 10.5, 12.5});
  // padding 1, stride 2, kernel 3: -inf padding never wins
  check_values(max_pool2d(x, 3, 2, 1), {5, 7, 13, 15});
  check_values(adaptive_avg_pool2d(x, 1, 1), {7.5});
  // 4 rows into 3 cells: [0,2), [1,3), [2,4)
  check_values(adaptive_avg_pool2d(x, 3, 1),
               {(0 + 1 + 2 + 3 + 4 + 5 + 6 + 7) / 8.0, (4 + 5 + 6 + 7 + 8 + 9 + 10 + 11) / 8.0,
                (8 + 9 + 10 + 11 + 12 + 13 + 14 + 15) / 8.0});
}

BOOST_AUTO_TEST_CASE(batch_norm_running_stats_train_vs_eval) {
  BatchNorm2d bn(1, 0.0, 0.5);
  Tensor x = tensor({1, 2, 3, 6}, {2, 1, 1, 2});  // mean 3, biased var 3.5, unbiased 14/3
  Tensor y = bn.forward(x);
  check_values(y, {-2 / std::sqrt(3.5), -1 / std::sqrt(3.5), 0, 3 / std::sqrt(3.5)}, 1e-5);
  check_values(bn.running_mean, {0.5 * 0 + 0.5 * 3}, 1e-6);
  check_values(bn.running_var, {0.5 * 1 + 0.5 * 14.0 / 3}, 1e-6);
  BOOST_CHECK_EQUAL(bn.num_batches_tracked.item(), 1.0);
  bn.eval();
  double rv = 0.5 + 7.0 / 3;
  check_values(bn.forward(tensor({1.5}, {1, 1, 1, 1})), {0.0}, 1e-6);
  check_values(bn.forward(tensor({2.5}, {1, 1, 1, 1})), {1 / std::sqrt(rv)}, 1e-5);
}

BOOST_AUTO_TEST_CASE(se_scales_channels_by_its_mlp) {
  manual_seed(12);
  SEBlock se(4, 2);
  Tensor x = randn({2, 4, 3, 3});
  Tensor y = se.forward(x);
  Tensor w = sigmoid(se.fc2->forward(relu(se.fc1->forward(mean(x, {2, 3})))));
  check_values(se.last_weights, w.to_vector<double>(), 1e-6);
  check_values(y, mul(x, w.reshape({2, 4, 1, 1})).to_vector<double>(), 1e-6);
}

BOOST_AUTO_TEST_CASE(cbam_channel_then_spatial) {
  manual_seed(13);
  CBAM cbam(4, 2, 7);
  Tensor x = randn({1, 4, 5, 5});
  Tensor y = cbam.forward(x);
  auto& ca = *cbam.channel;
  auto mlp = [&](const Tensor& d) { return ca.fc2->forward(relu(ca.fc1->forward(d))); };
  Tensor cw = sigmoid(add(mlp(mean(x, {2, 3})), mlp(amax(x, {2, 3})))).reshape({1, 4, 1, 1});
  Tensor x1 = mul(x, cw);
  Tensor maps = cat({mean(x1, {1}, true), amax(x1, {1}, true)}, 1);
  Tensor sw = sigmoid(conv2d(maps, cbam.spatial->conv->weight, Tensor(), 1, 3));
  check_values(y, mul(x1, sw).to_vector<double>(), 1e-5);
  BOOST_CHECK(cbam.last_spatial_map.shape() == (Shape{1, 5, 5}));
  BOOST_CHECK(cbam.last_channel_weights.shape() == (Shape{1, 4}));
}

BOOST_AUTO_TEST_CASE(losses_by_formula) {
  Tensor a = tensor({1, 2, 3}), b = tensor({1, 0, 5});
  BOOST_CHECK_CLOSE(mse_loss(a, b).item(), (0 + 4 + 4) / 3.0, 1e-5);
  BOOST_CHECK_CLOSE(mse_loss(a, b, Reduction::sum).item(), 8.0, 1e-5);
  Tensor logits = tensor({-30, 0.5, 40}), t = tensor({1, 0, 1});
  auto bce = [](double x, double y) {
    double s = 1 / (1 + std::exp(-x));
    return -(y * std::log(s) + (1 - y) * std::log1p(-s));
  };
  std::vector<double> got =
      binary_cross_entropy_with_logits(logits, t, Reduction::none).to_vector<double>();
  BOOST_CHECK_CLOSE(got[0], 30.0, 1e-4);  // stable where sigmoid underflows
  BOOST_CHECK_CLOSE(got[1], bce(0.5, 0), 1e-4);
  BOOST_CHECK_SMALL(got[2], 1e-9);
}

// The differences from torch 1.13 that docs/NN.md lists as deliberate.
BOOST_AUTO_TEST_CASE(torch_differences_on_purpose) {
  // A mean over targets that are all ignore_index is 0 with zero gradients (torch: NaN).
  Tensor logits = tensor({0.5, -1, 2, 0.1, 0.2, 0.3}, {2, 3}).requires_grad_();
  Tensor all_ignored = tensor_i64({-100, -100}, {2});
  for (double smoothing : {0.0, 0.1}) {
    logits.zero_grad();
    Tensor loss = cross_entropy(logits, all_ignored, -100, smoothing);
    BOOST_CHECK_EQUAL(loss.item(), 0.0);
    loss.backward();
    check_values(logits.grad(), std::vector<double>(6, 0.0), 0);
  }
  BOOST_CHECK_EQUAL(nll_loss(log_softmax(logits, 1), all_ignored).item(), 0.0);
  // Pooling sizes are floor mode: 5x5 with kernel 2 gives 2x2 (torch's ceil_mode=True: 3x3).
  Tensor x = zeros({1, 1, 5, 5});
  BOOST_CHECK(max_pool2d(x, 2).shape() == (Shape{1, 1, 2, 2}));
  BOOST_CHECK(avg_pool2d(x, 2).shape() == (Shape{1, 1, 2, 2}));
  // torch's limit on padding holds for both ("pad should be at most half of kernel size").
  check_error([&] { avg_pool2d(x, 2, 2, 2); }, {"avg_pool2d: padding 2 exceeds half the kernel 2"});
  check_error([&] { max_pool2d(x, 2, 2, 2); }, {"max_pool2d: padding 2 exceeds half the kernel 2"});
  // Toy-sized transformer defaults (torch: dim_feedforward 2048); torch's other defaults hold.
  TransformerLayerOptions o;
  BOOST_CHECK_EQUAL(o.dim_feedforward, 256);
  BOOST_CHECK_EQUAL(o.dropout, 0.1);
  BOOST_CHECK_EQUAL(o.activation, "relu");
  BOOST_CHECK(!o.norm_first);
  TransformerEncoderLayer layer(o);
  BOOST_CHECK_EQUAL(layer.norm1->eps, 1e-5);
  // A final LayerNorm exactly for pre-norm stacks (torch: whatever `norm` is passed).
  BOOST_CHECK(!TransformerEncoder(o, 1).norm && !TransformerDecoder(o, 1).norm);
  o.norm_first = true;
  BOOST_CHECK(TransformerEncoder(o, 1).norm && TransformerDecoder(o, 1).norm);
}

// A residual block with a 1x1 shortcut at stride 2 hands its input's gradient sum to the
// shortcut's rule after the main branch's (its identity is add_relu's first input, or with CBAM
// mul3_add_relu's), and the CPU's pointwise kernel adds its gradient into it: no accumulate_grad
// pass over the input in the backward. The gradient is the one the sweep sums when the shortcut's
// rule runs first (the main branch as add_relu's first input), bit for bit. (The input is made by
// an op: a leaf's gradient is summed apart, into its .grad.)
BOOST_AUTO_TEST_CASE(a_strided_shortcut_adds_its_gradient_into_the_blocks_input_sum) {
  for (const char* attention : {"none", "cbam"}) {
    BOOST_TEST_CONTEXT(attention) {
      manual_seed(23);
      ResidualBlock block(4, 8, 2, attention, 4);
      const Tensor x0 = randn({3, 4, 10, 10}), v = randn({3, 8, 5, 5});
      Tensor x = x0.detach().requires_grad_();
      int sums = 0;
      {
        Profiler profiler;
        sum(mul(block.forward(mul(x, 2.0)), v)).backward();
        for (const ProfileEvent& e : profiler.events())
          sums += e.name == "accumulate_grad" && e.shapes == shape_str(x.shape());
      }
      const Tensor xw = x0.detach().requires_grad_(), h = mul(xw, 2.0);
      Tensor y = block.bn2->forward(
          block.conv2->forward(block.bn1->forward_relu(block.conv1->forward(h))));
      if (block.cbam) y = block.cbam->forward(y);
      const Tensor identity = block.shortcut_bn->forward(block.shortcut_conv->forward(h));
      sum(mul(add_relu(y, identity), v)).backward();
      BOOST_TEST(qkv::testing::equal_values(x.grad(), xw.grad()));
      const Window2d shortcut{.kernel_h = 1, .kernel_w = 1, .stride_h = 2, .stride_w = 2};
      const bool in_place =
          x.backend().conv2d_adds_into_gx(x, block.shortcut_conv->weight, shortcut, 1);
      BOOST_TEST(sums == (in_place ? 0 : 1));
    }
  }
}

// A feed-forward block with a GELU runs its activation and dropout as one gelu_dropout op while
// training: the same output and gradients as the modules one after the other, bit for bit, from
// the same draws; in eval, or once the activation is replaced, the modules run as they are.
BOOST_AUTO_TEST_CASE(a_gelu_feed_forward_fuses_its_activation_into_the_dropout) {
  manual_seed(29);
  FeedForward block(8, 32, 0.2, "gelu");
  const Tensor x0 = randn({3, 5, 8}), v = randn({3, 5, 8});
  auto run = [&](bool modules_one_by_one, std::vector<std::string>* names) {
    Generator& gen = default_generator();
    gen.manual_seed(5);
    block.zero_grad();
    const Tensor x = x0.detach().requires_grad_();
    Profiler profiler;
    const Tensor y = modules_one_by_one ? block.linear2->forward(block.dropout->forward(
                                              block.activation->forward(block.linear1->forward(x))))
                                        : block.forward(x);
    sum(mul(y, v)).backward();
    for (const ProfileEvent& e : profiler.events())
      if (!e.scope && e.thread == 0 && names) names->push_back(e.name);
    return std::vector<Tensor>{y.detach(), x.grad(), block.linear1->weight.grad().clone()};
  };
  std::vector<std::string> fused_names;
  const std::vector<Tensor> fused = run(false, &fused_names), composed = run(true, nullptr);
  for (size_t i = 0; i < fused.size(); ++i)
    BOOST_TEST(qkv::testing::equal_values(fused[i], composed[i]));
  BOOST_TEST(std::count(fused_names.begin(), fused_names.end(), "gelu_dropout") == 2);
  BOOST_TEST(std::count(fused_names.begin(), fused_names.end(), "gelu") == 0);
  // in eval: gelu alone
  block.eval();
  std::vector<std::string> eval_names;
  run(false, &eval_names);
  BOOST_TEST(std::count(eval_names.begin(), eval_names.end(), "gelu") == 2);
  BOOST_TEST(std::count(eval_names.begin(), eval_names.end(), "gelu_dropout") == 0);
  block.train();
  // replaced by an activation of another type: that module runs, the dropout after it
  block.activation = std::make_shared<ReLU>();
  std::vector<std::string> relu_names;
  run(false, &relu_names);
  BOOST_TEST(std::count(relu_names.begin(), relu_names.end(), "gelu_dropout") == 0);
  BOOST_TEST(std::count(relu_names.begin(), relu_names.end(), "dropout") == 2);
}

// An encoder layer adds each sublayer's dropout into the residual stream with one dropout_add op
// while training, post-norm and pre-norm: the same output and gradients as its modules one after
// the other with add, bit for bit, from the same draws; in eval the add alone.
BOOST_AUTO_TEST_CASE(an_encoder_layer_adds_its_dropouts_into_the_residual_in_one_op) {
  for (bool norm_first : {false, true}) {
    BOOST_TEST_CONTEXT((norm_first ? "pre-norm" : "post-norm")) {
      manual_seed(31);
      TransformerLayerOptions options;
      options.d_model = 8, options.num_heads = 2, options.dim_feedforward = 16;
      options.dropout = 0.2, options.norm_first = norm_first;
      TransformerEncoderLayer layer(options);
      const Tensor x0 = randn({3, 5, 8}), v = randn({3, 5, 8});
      auto by_modules = [&](const Tensor& src) {
        auto attend = [&](const Tensor& h) {
          return layer.self_attn->forward(h, h, h, Tensor(), Tensor(), false, true, false).output;
        };
        if (norm_first) {
          Tensor x = add(src, layer.dropout1->forward(attend(layer.norm1->forward(src))));
          return add(x,
                     layer.dropout2->forward(layer.feed_forward->forward(layer.norm2->forward(x))));
        }
        Tensor x = layer.norm1->forward(add(src, layer.dropout1->forward(attend(src))));
        return layer.norm2->forward(
            add(x, layer.dropout2->forward(layer.feed_forward->forward(x))));
      };
      auto run = [&](bool modules_one_by_one, std::vector<std::string>* names) {
        default_generator().manual_seed(5);
        layer.zero_grad();
        const Tensor x = x0.detach().requires_grad_();
        Profiler profiler;
        const Tensor y = modules_one_by_one ? by_modules(x) : layer.forward(x);
        sum(mul(y, v)).backward();
        for (const ProfileEvent& e : profiler.events())
          if (!e.scope && e.thread == 0 && names) names->push_back(e.name);
        return std::vector<Tensor>{y.detach(), x.grad(), layer.norm1->weight.grad().clone()};
      };
      std::vector<std::string> fused_names;
      const std::vector<Tensor> fused = run(false, &fused_names), composed = run(true, nullptr);
      for (size_t i = 0; i < fused.size(); ++i)
        BOOST_TEST(qkv::testing::equal_values(fused[i], composed[i]));
      BOOST_TEST(std::count(fused_names.begin(), fused_names.end(), "dropout_add") == 4);
      layer.eval();
      std::vector<std::string> eval_names;
      run(false, &eval_names);
      BOOST_TEST(std::count(eval_names.begin(), eval_names.end(), "dropout_add") == 0);
    }
  }
}

// A Dropout of another type runs its own forward, then the add.
BOOST_AUTO_TEST_CASE(a_dropout_subclass_adds_what_its_forward_returns) {
  struct Doubled : Dropout {
    Doubled() : Dropout(0.5) {}
    Tensor forward(const Tensor& x) override { return mul(Dropout::forward(x), 2.0); }
  };
  Doubled doubled;
  const Tensor x = randn({4, 6}), residual = randn({4, 6});
  default_generator().manual_seed(8);
  const Tensor y = doubled.forward_add(x, residual);
  default_generator().manual_seed(8);
  const Tensor expected = add(residual, mul(dropout(x, 0.5, true), 2.0));
  BOOST_TEST(qkv::testing::equal_values(y, expected));
}

BOOST_AUTO_TEST_SUITE_END()
