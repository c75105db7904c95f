// Gradcheck cases for nn: its two recorded ops (efficient_attention, checkpoint) and every
// nn::Module type, each case named "nn.<Type>" or "nn.<Type>.<variant>" so the module guard
// (tests/models/test_registry_scan.cpp) finds it. Modules are compositions of engine ops, so these
// cases check the compositions (masks, reshapes between heads, windows of a convolution) in
// float64. Each case builds its module once, converts it to float64, and where a module's
// parameters matter to the check it swaps them for the case's inputs (the members are public
// handles) so their gradients are checked too.
#include "nn/gradcheck_cases.h"

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/batch_norm.h"
#include "nn/channel_attention.h"
#include "nn/checkpoint.h"
#include "nn/conv.h"
#include "nn/efficient_attention.h"
#include "nn/embedding.h"
#include "nn/feed_forward.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/pooling.h"
#include "nn/positional.h"
#include "nn/residual_block.h"
#include "nn/sequential.h"
#include "nn/transformer.h"

namespace qkv::nn {

namespace {

using X = const std::vector<Tensor>&;

}  // namespace

void register_gradcheck_cases(OpRegistry& r) {
  const LayerCases add_case{r, "nn", "nn."};
  const Domain mask = Domain::mask, away = Domain::away;

  // ---- attention -----------------------------------------------------------------------------
  add_case("scaled_dot_product_attention", {{{2, 3, 4}}, {{2, 5, 4}}, {{2, 5, 3}}, {{3, 5}, mask}},
           [](X x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]).output; });
  add_case("scaled_dot_product_attention.causal", {{{2, 4, 3}}, {{2, 4, 3}}, {{2, 4, 3}}},
           [](X x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, true).output; });
  add_case("scaled_dot_product_attention.additive",
           {{{2, 3, 4}}, {{2, 3, 4}}, {{2, 3, 4}}, {{3, 3}}},
           [](X x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]).output; });

  // The memory-efficient kernel's own backward (recomputed scores, online softmax), with a bool
  // mask read in place through broadcast strides, causal, a sliding window, and a block-sparse
  // layout whose empty blocks are skipped (2 x 2 blocks, so most tiles are skipped here).
  r.add({"efficient_attention",
         "nn",
         {{{2, 5, 4}}, {{2, 6, 4}}, {{2, 6, 3}}, {{5, 6}, mask}},
         [](X x) { return efficient_attention(x[0], x[1], x[2], {x[3]}); }});
  // Dropout drawn inside the kernel, forward and again in backward: a generator made afresh per
  // evaluation keeps the mask fixed, as gradcheck needs.
  add_case("efficient_attention.dropout", {{{2, 5, 4}}, {{2, 6, 4}}, {{2, 6, 3}}, {{5, 6}, mask}},
           [](X x) {
             Generator gen(99);
             return efficient_attention(x[0], x[1], x[2], {x[3]}, {}, -1, 0.3, &gen);
           });
  // Operands read in place: q and k as attention's heads ([B, T, H, d] viewed as [B, H, T, d]),
  // v transposed (a strided last dim, copied to contiguous first).
  add_case("efficient_attention.strided", {{{2, 5, 3, 4}}, {{2, 6, 3, 4}}, {{2, 3, 3, 6}}},
           [](X x) {
             return efficient_attention(x[0].permute({0, 2, 1, 3}), x[1].permute({0, 2, 1, 3}),
                                        x[2].transpose(-1, -2));
           });
  add_case("efficient_attention.causal", {{{2, 5, 4}}, {{2, 5, 4}}, {{2, 5, 3}}}, [](X x) {
    AttentionPattern p;
    p.causal = true;
    return efficient_attention(x[0], x[1], x[2], {}, p);
  });
  add_case("efficient_attention.window", {{{1, 2, 7, 4}}, {{1, 2, 7, 4}}, {{1, 2, 7, 3}}}, [](X x) {
    AttentionPattern p;
    p.window = 2;
    return efficient_attention(x[0], x[1], x[2], {}, p);
  });
  add_case("efficient_attention.block_sparse", {{{2, 7, 4}}, {{2, 7, 4}}, {{2, 7, 3}}}, [](X x) {
    AttentionPattern p;
    p.block_size = 2;
    p.block_layout = band_block_layout(7, 7, 2, 0, 1);
    return efficient_attention(x[0], x[1], x[2], {}, p);
  });
  // Self-attention's packed operands: qkv [B, T, 3E] read as three views of H = 2 heads, the
  // three gradients written into one tensor; with a bool mask, and with dropout.
  r.add({"efficient_attention_packed",
         "nn",
         {{{2, 5, 12}}, {{5, 5}, mask}},
         [](X x) { return efficient_attention_packed(x[0], 2, {x[1]}); }});
  add_case("efficient_attention_packed.dropout", {{{2, 5, 12}}}, [](X x) {
    Generator gen(99);
    return efficient_attention_packed(x[0], 2, {}, {}, -1, 0.3, &gen);
  });
  // Checkpointing recomputes in backward; its gradients must be those of the plain composition,
  // for the activation input and for a parameter passed as a leaf.
  r.add({"checkpoint", "nn", {{{3, 4}}, {{4, 5}}}, [](X x) {
           Tensor w = x[1];
           return checkpoint([w](const std::vector<Tensor>& in) { return tanh(matmul(in[0], w)); },
                             {x[0]}, {w});
         }});

  // MultiheadAttention with its projection weights as inputs, under each mask kind.
  auto mha = in_f64(std::make_shared<MultiheadAttention>(6, 2));
  auto mha_case = [mha](X x, const Tensor& pad, const Tensor& attn_mask, bool causal) {
    mha->q_proj->weight = x[1];
    mha->k_proj->weight = x[2];
    mha->out_proj->weight = x[3];
    AttentionOutput a = mha->forward(x[0], x[0], x[0], pad, attn_mask, true, false, causal);
    return add(sum(a.output), mul(sum(mul(a.weights, a.weights)), 0.5));
  };
  std::vector<InputSpec> mha_inputs{{{2, 4, 6}}, {{6, 6}}, {{6, 6}}, {{6, 6}}};
  add_case("MultiheadAttention", mha_inputs,
           [mha_case](X x) { return mha_case(x, {}, {}, false); });
  add_case("MultiheadAttention.key_padding_mask", mha_inputs, [mha_case](X x) {
    Tensor pad = tensor({0, 0, 1, 1, 0, 0, 0, 1}, {2, 4}).to(DType::b8);
    return mha_case(x, pad, {}, false);
  });
  add_case("MultiheadAttention.causal", mha_inputs,
           [mha_case](X x) { return mha_case(x, {}, {}, true); });
  add_case("MultiheadAttention.bool_attn_mask", mha_inputs, [mha_case](X x) {
    Tensor m = tensor({0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1}, {4, 4}).to(DType::b8);
    return mha_case(x, {}, m, false);  // the last row fully masked: zeros, finite gradients
  });
  add_case("MultiheadAttention.float_attn_mask",
           {{{2, 4, 6}}, {{6, 6}}, {{6, 6}}, {{6, 6}}, {{4, 4}}},
           [mha_case](X x) { return mha_case(x, {}, x[4], false); });
  // Local and block-sparse MultiheadAttention through the memory-efficient path (no weights).
  auto local = in_f64(std::make_shared<MultiheadAttention>(6, 2));
  local->pattern.window = 1;
  auto sparse = in_f64(std::make_shared<MultiheadAttention>(6, 2));
  sparse->pattern.block_size = 2;
  sparse->pattern.block_layout = band_block_layout(5, 5, 2, 0, 1);
  for (auto [tag, m] : {std::pair{"local", local}, std::pair{"block_sparse", sparse}})
    // `mha = m`: clang before 16 cannot capture a structured binding by name.
    add_case(std::string("MultiheadAttention.") + tag, {{{2, 5, 6}}, {{6, 6}}}, [mha = m](X x) {
      mha->q_proj->weight = x[1];
      Tensor pad = tensor({0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, {2, 5}).to(DType::b8);
      return mha->forward(x[0], x[0], x[0], pad, {}, false, true, true).output;
    });
  auto cross = in_f64(std::make_shared<MultiheadAttention>(4, 2, 0.0, true, 3, 5));
  add_case("MultiheadAttention.cross_kdim_vdim", {{{2, 3, 4}}, {{2, 5, 3}}, {{2, 5, 5}}},
           [cross](X x) {
             Tensor pad = tensor({0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {2, 5}).to(DType::b8);
             return cross->forward(x[0], x[1], x[2], pad).output;
           });

  // ---- positional encodings (each inside a self-attention layer) --------------------------------
  for (std::string kind : {"relative", "rope", "alibi"}) {
    auto attn = in_f64(std::make_shared<MultiheadAttention>(8, 2));
    attn->set_position(make_attention_position(kind, 2, 4));
    attn->position->to(DType::f64);
    if (kind == "relative") {
      auto rel = std::dynamic_pointer_cast<RelativePositionBias>(attn->position);
      add_case("RelativePositionBias", {{{2, 5, 8}}, {{2 * rel->max_distance + 1, 4}}},
               [attn, rel](X x) {
                 rel->weight = x[1];
                 return attn->forward(x[0], x[0], x[0], {}, {}, false, true, true).output;
               });
    } else {
      add_case(kind == "rope" ? "RotaryEmbedding" : "ALiBi", {{{2, 5, 8}}}, [attn](X x) {
        return attn->forward(x[0], x[0], x[0], {}, {}, false, true, true).output;
      });
    }
  }
  // The base class is a usable no-op: attention through it is plain attention.
  auto plain = in_f64(std::make_shared<MultiheadAttention>(4, 2));
  plain->set_position(std::make_shared<AttentionPosition>());
  add_case("AttentionPosition", {{{2, 3, 4}}}, [plain](X x) {
    return plain->forward(x[0], x[0], x[0], {}, {}, false, true, true).output;
  });
  auto sinusoidal = in_f64(std::make_shared<SinusoidalPositionalEncoding>(6, 4));
  add_case("SinusoidalPositionalEncoding", {{{2, 5, 6}}},  // 5 > max_len 4: the table grows
           [sinusoidal](X x) { return mul(sinusoidal->forward(x[0], 1), x[0]); });
  auto learned = in_f64(std::make_shared<LearnedPositionalEncoding>(6, 8));
  add_case("LearnedPositionalEncoding", {{{2, 5, 6}}, {{8, 6}}}, [learned](X x) {
    learned->weight = x[1];
    return square(learned->forward(x[0], 2));
  });

  // ---- transformer layers --------------------------------------------------------------------
  for (bool norm_first : {false, true}) {
    TransformerLayerOptions o{.d_model = 8,
                              .num_heads = 2,
                              .dim_feedforward = 12,
                              .dropout = 0,
                              .activation = "gelu",
                              .norm_first = norm_first,
                              .positional = ""};
    auto enc = in_f64(std::make_shared<TransformerEncoderLayer>(o));
    auto dec = in_f64(std::make_shared<TransformerDecoderLayer>(o));
    std::string tag = norm_first ? ".pre_norm" : ".post_norm";
    add_case("TransformerEncoderLayer" + tag, {{{2, 4, 8}}}, [enc](X x) {
      Tensor pad = tensor({0, 0, 0, 1, 0, 0, 0, 0}, {2, 4}).to(DType::b8);
      return enc->forward(x[0], pad);
    });
    add_case("TransformerDecoderLayer" + tag, {{{2, 3, 8}}, {{2, 4, 8}}},
             [dec](X x) { return dec->forward(x[0], x[1]); });
  }

  // Whole stacks: two encoder layers with the final norm of pre-norm, a decoder with key padding.
  TransformerLayerOptions stack_options{.d_model = 4,
                                        .num_heads = 2,
                                        .dim_feedforward = 6,
                                        .dropout = 0,
                                        .activation = "relu",
                                        .norm_first = true,
                                        .positional = ""};
  auto encoder = in_f64(std::make_shared<TransformerEncoder>(stack_options, 2));
  add_case("TransformerEncoder", {{{2, 3, 4}}}, [encoder](X x) {
    Tensor pad = tensor({0, 0, 1, 0, 0, 0}, {2, 3}).to(DType::b8);
    return encoder->forward(x[0], pad);
  });
  stack_options.norm_first = false;
  auto decoder = in_f64(std::make_shared<TransformerDecoder>(stack_options, 1));
  add_case("TransformerDecoder", {{{2, 3, 4}}, {{2, 2, 4}}}, [decoder](X x) {
    Tensor memory_pad = tensor({0, 1, 0, 0}, {2, 2}).to(DType::b8);
    return decoder->forward(x[0], x[1], {}, memory_pad);
  });

  // ---- layers --------------------------------------------------------------------------------
  auto linear_layer = in_f64(std::make_shared<Linear>(4, 3));
  add_case("Linear", {{{2, 4}}, {{3, 4}}, {{3}}}, [linear_layer](X x) {
    linear_layer->weight = x[1];
    linear_layer->bias = x[2];
    return linear_layer->forward(x[0]);
  });
  auto table = in_f64(std::make_shared<Embedding>(5, 3));
  add_case("Embedding", {{{5, 3}}, {{2, 4}, Domain::index, 5}}, [table](X x) {
    table->weight = x[0];
    return table->forward(x[1]);
  });
  auto feed_forward = in_f64(std::make_shared<FeedForward>(4, 6, 0.0, "gelu"));
  add_case("FeedForward", {{{2, 3, 4}}},
           [feed_forward](X x) { return feed_forward->forward(x[0]); });
  auto sequential = std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{
      std::make_shared<Linear>(4, 5), std::make_shared<GELU>(GeluApprox::tanh),
      std::make_shared<Linear>(5, 2)});
  sequential->to(DType::f64);
  add_case("Sequential", {{{3, 4}}}, [sequential](X x) { return sequential->forward(x[0]); });
  add_case("ReLU", {{{3, 4}, away}}, [](X x) { return ReLU().forward(x[0]); });
  add_case("GELU", {{{3, 4}}}, [](X x) { return GELU().forward(x[0]); });
  add_case("GELU.tanh", {{{3, 4}}}, [](X x) { return GELU(GeluApprox::tanh).forward(x[0]); });
  add_case("Identity", {{{3, 4}}}, [](X x) { return Identity().forward(x[0]); });
  // The default generator is rewound after each forward, so every evaluation drops the same units.
  add_case("Dropout", {{{4, 5}}}, [](X x) {
    Dropout drop(0.3);
    Generator& gen = default_generator();
    const uint64_t start = gen.offset();
    Tensor y = drop.forward(x[0]);
    gen.set_offset(start);
    return y;
  });

  // ---- normalization -------------------------------------------------------------------------
  auto ln = in_f64(std::make_shared<LayerNorm>(5));
  add_case("LayerNorm", {{{3, 5}}, {{5}}, {{5}}}, [ln](X x) {
    ln->weight = x[1];
    ln->bias = x[2];
    return ln->forward(x[0]);
  });
  auto bn = in_f64(std::make_shared<BatchNorm2d>(3));
  add_case("BatchNorm2d.train", {{{2, 3, 2, 2}}, {{3}}, {{3}}}, [bn](X x) {
    bn->train();
    bn->weight = x[1];
    bn->bias = x[2];
    return bn->forward(x[0]);
  });
  add_case("BatchNorm2d.eval", {{{2, 3, 2, 2}}}, [bn](X x) {
    bn->eval();
    return bn->forward(x[0]);
  });

  // ---- convolution and pooling ---------------------------------------------------------------
  add_case("conv2d", {{{2, 3, 5, 5}}, {{4, 3, 3, 3}}, {{4}}},
           [](X x) { return conv2d(x[0], x[1], x[2], 1, 1); });
  auto conv = in_f64(std::make_shared<Conv2d>(2, 3, 3, 1, 2));
  add_case("Conv2d", {{{1, 2, 4, 4}}, {{3, 2, 3, 3}}, {{3}}}, [conv](X x) {
    conv->weight = x[1];
    conv->bias = x[2];
    return conv->forward(x[0]);
  });
  add_case("conv2d.stride2_groups", {{{1, 4, 6, 5}}, {{6, 2, 3, 2}}},
           [](X x) { return conv2d(x[0], x[1], Tensor(), 2, 1, 2); });
  // Max pooling's gradient jumps where two window entries tie; random inputs almost never tie.
  add_case("max_pool2d", {{{2, 2, 5, 5}}}, [](X x) { return max_pool2d(x[0], 3, 2, 1); });
  add_case("avg_pool2d", {{{2, 2, 4, 4}}}, [](X x) { return avg_pool2d(x[0], 2); });
  add_case("adaptive_avg_pool2d", {{{1, 2, 5, 7}}},
           [](X x) { return adaptive_avg_pool2d(x[0], 2, 3); });

  add_case("MaxPool2d", {{{1, 2, 5, 5}}}, [](X x) { return MaxPool2d(3, 2, 1).forward(x[0]); });
  add_case("AvgPool2d", {{{1, 2, 5, 5}}}, [](X x) { return AvgPool2d(3, 2, 1).forward(x[0]); });
  add_case("AdaptiveAvgPool2d", {{{1, 2, 5, 7}}},
           [](X x) { return AdaptiveAvgPool2d(2, 3).forward(x[0]); });
  add_case("GlobalAvgPool", {{{2, 3, 2, 3}}}, [](X x) { return GlobalAvgPool().forward(x[0]); });

  // ---- channel attention ---------------------------------------------------------------------
  auto channel = in_f64(std::make_shared<ChannelAttention>(8, 4));
  add_case("ChannelAttention", {{{2, 8, 3, 3}}}, [channel](X x) { return channel->forward(x[0]); });
  auto spatial = in_f64(std::make_shared<SpatialAttention>(3));
  add_case("SpatialAttention", {{{2, 3, 4, 4}}, {{1, 2, 3, 3}}}, [spatial](X x) {
    spatial->conv->weight = x[1];
    return spatial->forward(x[0]);
  });
  auto se = in_f64(std::make_shared<SEBlock>(8, 4));
  add_case("SEBlock", {{{2, 8, 3, 3}}}, [se](X x) { return se->forward(x[0]); });
  auto cbam = in_f64(std::make_shared<CBAM>(8, 4, 3));
  add_case("CBAM", {{{2, 8, 4, 4}}, {{1, 2, 3, 3}}}, [cbam](X x) {
    cbam->spatial->conv->weight = x[1];
    return cbam->forward(x[0]);
  });

  // SE and CBAM inside a residual block, after the main branch and before the identity add.
  for (std::string kind : {"se", "cbam"}) {
    auto block = in_f64(std::make_shared<ResidualBlock>(4, 6, 2, kind, 2));
    add_case("ResidualBlock." + kind, {{{2, 4, 5, 5}}},
             [block](X x) { return block->forward(x[0]); });
  }

  // ---- losses --------------------------------------------------------------------------------
  add_case("mse_loss", {{{3, 4}}, {{3, 4}}}, [](X x) { return mse_loss(x[0], x[1]); });
  add_case("binary_cross_entropy_with_logits", {{{3, 4}, away}, {{3, 4}, Domain::unit}},
           [](X x) { return binary_cross_entropy_with_logits(x[0], x[1]); });
  // logits whose exp overflows float64: the stable form's both sides
  add_case("binary_cross_entropy_with_logits",
           {in_range({3, 4}, -800, 800), {{3, 4}, Domain::unit}},
           [](X x) { return binary_cross_entropy_with_logits(x[0], x[1]); });
  add_case("cross_entropy", {{{4, 5}}, {{4}, Domain::index, 5}},
           [](X x) { return cross_entropy(x[0], x[1]); });
}

}  // namespace qkv::nn
