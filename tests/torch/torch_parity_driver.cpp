// torch_parity_driver CASE IN.safetensors OUT.safetensors
//
// Runs one qkv module, optimizer or model on the weights and inputs the PyTorch side wrote, and
// writes every output and gradient back for it to compare (tests/torch/parity_case.h has the file
// conventions, docs/TESTING.md the suite). One function per case; `kCases` lists them.
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "engine/error.h"
#include "models/seq2seq.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/batch_norm.h"
#include "nn/conv.h"
#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/pooling.h"
#include "nn/sequential.h"
#include "nn/transformer.h"
#include "tests/torch/parity_case.h"

namespace qkv::parity {
namespace {

Reduction reduction_of(const Case& c) {
  const std::string r = c.text("reduction", "mean");
  QKV_CHECK(r == "mean" || r == "sum" || r == "none", c.name, "unknown reduction '", r, "'");
  return r == "mean" ? Reduction::mean : r == "sum" ? Reduction::sum : Reduction::none;
}

// ---- layers -------------------------------------------------------------------------------------

void linear_case(Case& c) {
  nn::Linear m(c.integer("in_features"), c.integer("out_features"), c.flag("bias", true));
  c.load(m);
  c.output("y", m.forward(c.input("x")));
  c.backward();
}

void layer_norm_case(Case& c) {
  Shape shape;
  for (int64_t i = 0; i < c.integer("normalized_dims"); ++i)
    shape.push_back(c.integer("normalized_shape." + std::to_string(i)));
  nn::LayerNorm m(shape, c.number("eps", 1e-5), c.flag("elementwise_affine", true));
  c.load(m);
  c.output("y", m.forward(c.input("x")));
  c.backward();
}

void embedding_case(Case& c) {
  // No padding_idx in the metadata is PyTorch's None (a negative one counts from the end).
  const std::optional<int64_t> padding_idx =
      c.has_meta("padding_idx") ? std::optional<int64_t>(c.integer("padding_idx")) : std::nullopt;
  nn::Embedding m(c.integer("num_embeddings"), c.integer("embedding_dim"), padding_idx);
  c.load(m);
  c.output("y", m.forward(c.input("ids")));
  c.backward();
}

void activation_case(Case& c) {
  const std::string kind = c.text("activation");
  QKV_CHECK(kind == "relu" || kind == "gelu" || kind == "gelu_tanh", c.name, "unknown activation '",
            kind, "'");
  std::shared_ptr<nn::Layer> m;
  if (kind == "relu") m = std::make_shared<nn::ReLU>();
  if (kind == "gelu") m = std::make_shared<nn::GELU>();
  if (kind == "gelu_tanh") m = std::make_shared<nn::GELU>(GeluApprox::tanh);
  c.output("y", m->forward(c.input("x")));
  c.backward();
}

// Dropout(p) in training mode: the caller checks the outputs against the mask they imply.
void dropout_case(Case& c) {
  nn::Dropout m(c.number("p"));
  c.output("y", m.forward(c.input("x")));
  c.backward();
}

// Sequential(Linear(5, 6), ReLU, Dropout(0.3), Identity, Linear(6, 3), GELU) in eval mode, so
// Dropout is the identity; its layers are registered as "0" .. "5", as in torch.nn.Sequential.
void sequential_case(Case& c) {
  nn::Sequential m({std::make_shared<nn::Linear>(5, 6), std::make_shared<nn::ReLU>(),
                    std::make_shared<nn::Dropout>(0.3), std::make_shared<nn::Identity>(),
                    std::make_shared<nn::Linear>(6, 3), std::make_shared<nn::GELU>()});
  m.eval();
  c.load(m);
  c.output("y", m.forward(c.input("x")));
  c.backward();
}

// ---- attention and transformer layers -----------------------------------------------------------

void multihead_attention_case(Case& c) {
  nn::MultiheadAttention m(c.integer("embed_dim"), c.integer("num_heads"), 0.0,
                           c.flag("bias", true), c.integer("kdim", -1), c.integer("vdim", -1));
  c.load(m);
  Tensor query = c.input("query");
  // Self-attention passes one tensor three times, as a transformer layer does.
  Tensor key = c.flag("self") ? query : c.input("key");
  Tensor value = c.flag("self") ? query : c.input("value");
  const bool need_weights = c.flag("need_weights");
  nn::AttentionOutput a = m.forward(query, key, value, c.optional_mask("key_padding_mask"),
                                    c.optional_mask("attn_mask"), need_weights,
                                    c.flag("average_attn_weights", true), c.flag("is_causal"));
  c.output("output", a.output);
  if (need_weights) c.output("weights", a.weights);
  c.backward();
}

nn::TransformerLayerOptions layer_options(const Case& c) {
  nn::TransformerLayerOptions o;
  o.d_model = c.integer("d_model");
  o.num_heads = c.integer("num_heads");
  o.dim_feedforward = c.integer("dim_feedforward");
  o.dropout = 0.0;
  o.activation = c.text("activation");
  o.norm_first = c.flag("norm_first");
  return o;
}

void encoder_layer_case(Case& c) {
  nn::TransformerEncoderLayer m(layer_options(c));
  c.load(m);
  c.output("y", m.forward(c.input("src"), c.optional_mask("src_key_padding_mask"),
                          c.optional_mask("src_mask"), c.flag("is_causal")));
  c.backward();
}

void decoder_layer_case(Case& c) {
  nn::TransformerDecoderLayer m(layer_options(c));
  c.load(m);
  c.output("y",
           m.forward(c.input("tgt"), c.input("memory"), c.optional_mask("tgt_key_padding_mask"),
                     c.optional_mask("memory_key_padding_mask"), c.flag("tgt_is_causal")));
  c.backward();
}

void encoder_case(Case& c) {
  nn::TransformerEncoder m(layer_options(c), c.integer("num_layers"));
  c.load(m);
  c.output("y", m.forward(c.input("src"), c.optional_mask("src_key_padding_mask")));
  c.backward();
}

void decoder_case(Case& c) {
  nn::TransformerDecoder m(layer_options(c), c.integer("num_layers"));
  c.load(m);
  c.output("y",
           m.forward(c.input("tgt"), c.input("memory"), c.optional_mask("tgt_key_padding_mask"),
                     c.optional_mask("memory_key_padding_mask")));
  c.backward();
}

// ---- convolution, normalization, pooling --------------------------------------------------------

void conv2d_case(Case& c) {
  nn::Conv2d m(c.integer("in_channels"), c.integer("out_channels"), c.integer("kernel_size"),
               c.integer("stride", 1), c.integer("padding", 0), c.integer("groups", 1),
               c.flag("bias", true));
  c.load(m);
  c.output("y", m.forward(c.input("x")));
  c.backward();
}

// Training steps on x.0 .. x.<steps-1> (outputs, gradients and running statistics after each),
// then one eval step on x.eval.
void batch_norm2d_case(Case& c) {
  nn::BatchNorm2d m(c.integer("num_features"), c.number("eps", 1e-5), c.number("momentum", 0.1));
  c.load(m);
  for (int64_t step = 0; step < c.integer("steps"); ++step) {
    const std::string s = std::to_string(step);
    c.output("y." + s, m.forward(c.input("x." + s)));
    c.backward("grad." + s + ".");
    for (const auto& [name, buffer] : m.named_buffers()) c.write(s + "." + name, buffer);
  }
  m.eval();
  c.output("y.eval", m.forward(c.input("x.eval")));
  c.backward("grad.eval.");
}

void pool_case(Case& c) {
  const std::string kind = c.text("pool");
  Tensor x = c.input("x");
  Tensor y;
  if (kind == "max")
    y = nn::MaxPool2d(c.integer("kernel_size"), c.integer("stride", -1), c.integer("padding", 0))
            .forward(x);
  else if (kind == "avg")
    y = nn::AvgPool2d(c.integer("kernel_size"), c.integer("stride", -1), c.integer("padding", 0))
            .forward(x);
  else if (kind == "adaptive_avg")
    y = nn::AdaptiveAvgPool2d(c.integer("out_h"), c.integer("out_w")).forward(x);
  else
    throw Error(c.name + ": unknown pool '" + kind + "' (max, avg, adaptive_avg)");
  c.output("y", y);
  c.backward();
}

// ---- losses -------------------------------------------------------------------------------------

void cross_entropy_case(Case& c) {
  c.output("loss",
           nn::cross_entropy(c.input("logits"), c.input("target"), c.integer("ignore_index", -100),
                             c.number("label_smoothing", 0.0), reduction_of(c)));
  c.backward();
}

void nll_loss_case(Case& c) {
  c.output("loss", nn::nll_loss(c.input("log_probs"), c.input("target"),
                                c.integer("ignore_index", -100), reduction_of(c)));
  c.backward();
}

void mse_loss_case(Case& c) {
  c.output("loss", nn::mse_loss(c.input("input"), c.input("target"), reduction_of(c)));
  c.backward();
}

void bce_with_logits_case(Case& c) {
  c.output("loss", nn::binary_cross_entropy_with_logits(c.input("logits"), c.input("target"),
                                                        reduction_of(c)));
  c.backward();
}

// ---- optimizers ---------------------------------------------------------------------------------

// Parameters param.p0 .. param.p<n-1>; before step k each parameter i gets the gradient
// g.<k>.p<i> when the file has it, and none otherwise: a gradient that arrives late, or skips a
// step.
std::vector<Tensor> optimizer_params(const Case& c) {
  std::vector<Tensor> params;
  for (int64_t i = 0; c.has("param.p" + std::to_string(i)); ++i) {
    Tensor p = c.tensor("param.p" + std::to_string(i)).clone();
    p.requires_grad_(true);
    params.push_back(p);
  }
  QKV_CHECK(!params.empty(), c.name, "missing tensor 'param.p0'");
  return params;
}

std::unique_ptr<nn::Optimizer> make_optimizer(const Case& c, std::vector<Tensor> params) {
  const std::string kind = c.text("optimizer");
  const double lr = c.number("lr");
  if (kind == "sgd")
    return std::make_unique<nn::SGD>(params, lr,
                                     nn::SGDOptions{.momentum = c.number("momentum", 0),
                                                    .dampening = c.number("dampening", 0),
                                                    .weight_decay = c.number("weight_decay", 0),
                                                    .nesterov = c.flag("nesterov")});
  nn::AdamOptions o{.beta1 = c.number("beta1", 0.9),
                    .beta2 = c.number("beta2", 0.999),
                    .eps = c.number("eps", 1e-8),
                    .weight_decay = c.number("weight_decay", kind == "adamw" ? 1e-2 : 0.0)};
  if (kind == "adam") return std::make_unique<nn::Adam>(params, lr, o);
  if (kind == "adamw") return std::make_unique<nn::AdamW>(params, lr, o);
  throw Error(c.name + ": unknown optimizer '" + kind + "' (sgd, adam, adamw)");
}

// Writes step<k>.p<i> after every step and the optimizer's state ("state.<i>.<buffer>") at the
// end. A "lr.<k>" entry sets the learning rate before step k.
void optimizer_case(Case& c) {
  std::vector<Tensor> params = optimizer_params(c);
  auto opt = make_optimizer(c, params);
  for (int64_t step = 0; step < c.integer("steps"); ++step) {
    const std::string s = std::to_string(step);
    if (c.has_meta("lr." + s)) opt->set_lr(c.number("lr." + s));
    opt->zero_grad();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = "g." + s + ".p" + std::to_string(i);
      if (c.has(key)) params[i].set_grad(c.tensor(key).clone());
    }
    opt->step();
    for (size_t i = 0; i < params.size(); ++i)
      c.write("step" + s + ".p" + std::to_string(i), params[i]);
  }
  for (const auto& [name, t] : opt->state_dict())
    if (name.rfind("state.", 0) == 0) c.write(name, t);
}

// clip_grad_norm_ over param.p<i> with the gradients g.p<i> (a parameter without one is skipped):
// the norm it returns and the gradients after.
void clip_grad_norm_case(Case& c) {
  std::vector<Tensor> params = optimizer_params(c);
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string key = "g.p" + std::to_string(i);
    if (c.has(key)) params[i].set_grad(c.tensor(key).clone());
  }
  const double norm = nn::clip_grad_norm_(params, c.number("max_norm"));
  c.write("out.norm", scalar_tensor(norm, {DType::f64}));
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].grad().defined()) c.write("grad.p" + std::to_string(i), params[i].grad());
}

// ---- the whole model ----------------------------------------------------------------------------

// Seq2SeqTransformer from the JSON config in metadata "config" (dropout 0): logits and all
// gradients of the mean token cross-entropy (pad ignored) on in.src / in.tgt_in / in.tgt_out, then
// `steps` training steps of AdamW (lr, weight_decay) with clip_grad_norm_(max_norm) on the batches
// train.<k>.{src,tgt_in,tgt_out}: the loss of each step and the final weights.
void seq2seq_case(Case& c) {
  models::Seq2SeqConfig config = nlohmann::json::parse(c.text("config"));
  QKV_CHECK(config.dropout == 0.0, c.name, "the parity run needs dropout 0");
  models::Seq2SeqTransformer model(config);
  c.load(model);
  auto loss_of = [&](const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out,
                     Tensor* logits_out) {
    Tensor logits = model.forward(src, tgt_in, eq(src, double(config.pad_id)),
                                  eq(tgt_in, double(config.pad_id)));
    if (logits_out) *logits_out = logits;
    return nn::cross_entropy(logits.reshape({-1, config.tgt_vocab}), tgt_out.reshape({-1}),
                             config.pad_id);
  };
  Tensor logits;
  Tensor loss = loss_of(c.input("src"), c.input("tgt_in"), c.input("tgt_out"), &logits);
  c.output("logits", logits);
  c.output("loss", loss);
  c.backward();

  nn::AdamW opt(
      model.parameters(), c.number("lr"),
      {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = c.number("weight_decay")});
  std::vector<double> losses;
  for (int64_t step = 0; step < c.integer("steps"); ++step) {
    const std::string p = "train." + std::to_string(step) + ".";
    opt.zero_grad();
    Tensor l =
        loss_of(c.tensor(p + "src"), c.tensor(p + "tgt_in"), c.tensor(p + "tgt_out"), nullptr);
    l.backward();
    nn::clip_grad_norm_(model.parameters(), c.number("max_norm"));
    opt.step();
    losses.push_back(l.item());
  }
  c.write("out.train_loss", qkv::tensor(losses, {}, {DType::f64}));
  for (const auto& [name, p] : model.named_parameters()) c.write("final." + name, p);
}

const std::map<std::string, std::function<void(Case&)>> kCases = {
    {"linear", linear_case},
    {"layer_norm", layer_norm_case},
    {"embedding", embedding_case},
    {"activation", activation_case},
    {"dropout", dropout_case},
    {"sequential", sequential_case},
    {"multihead_attention", multihead_attention_case},
    {"encoder_layer", encoder_layer_case},
    {"decoder_layer", decoder_layer_case},
    {"encoder", encoder_case},
    {"decoder", decoder_case},
    {"conv2d", conv2d_case},
    {"batch_norm2d", batch_norm2d_case},
    {"pool", pool_case},
    {"cross_entropy", cross_entropy_case},
    {"nll_loss", nll_loss_case},
    {"mse_loss", mse_loss_case},
    {"bce_with_logits", bce_with_logits_case},
    {"optimizer", optimizer_case},
    {"clip_grad_norm", clip_grad_norm_case},
    {"seq2seq", seq2seq_case},
};

}  // namespace
}  // namespace qkv::parity

int main(int argc, char** argv) {
  using namespace qkv::parity;
  if (argc != 4) {
    std::fprintf(stderr, "usage: torch_parity_driver CASE IN.safetensors OUT.safetensors\n");
    return 2;
  }
  try {
    auto it = kCases.find(argv[1]);
    if (it == kCases.end()) {
      std::string names;
      for (const auto& [name, fn] : kCases) names += (names.empty() ? "" : ", ") + name;
      throw qkv::Error(std::string("torch_parity_driver: unknown case '") + argv[1] + "' (" +
                       names + ")");
    }
    Case c(argv[1], qkv::nn::load_safetensors(argv[2]));
    it->second(c);
    qkv::nn::save_safetensors(argv[3], c.results());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
