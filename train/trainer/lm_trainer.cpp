#include "train/trainer/lm_trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/autograd.h"
#include "engine/error.h"
#include "nn/optim.h"
#include "nn/param_groups.h"
#include "nn/safetensors.h"
#include "nn/schedule.h"
#include "train/atomic_file.h"
#include "train/bpe_tokenizer.h"
#include "train/char_tokenizer.h"
#include "train/lm_data.h"

namespace qkv::train {

namespace {

void check_config(const LmTrainConfig& c) {
  QKV_CHECK(c.tokenizer == "char" || c.tokenizer == "bpe", "--tokenizer",
            "must be char or bpe, got '", c.tokenizer, "'");
  QKV_CHECK(c.batch_size > 0, "--batch-size", "must be positive, got ", c.batch_size);
  QKV_CHECK(c.steps >= 0, "--steps", "must be >= 0, got ", c.steps);
  QKV_CHECK(c.eval_every > 0, "--eval-every", "must be positive, got ", c.eval_every);
  QKV_CHECK(c.eval_windows > 0, "--eval-windows", "must be positive, got ", c.eval_windows);
  QKV_CHECK(c.lr > 0, "--lr", "must be positive, got ", c.lr);
  QKV_CHECK(c.clip >= 0, "--clip", "must be >= 0, got ", c.clip);
}

std::unique_ptr<LmTokenizer> make_tokenizer(const LmTrainConfig& c, const std::string& text) {
  if (c.tokenizer == "bpe")
    return std::make_unique<BpeTokenizer>(BpeTokenizer::train(text, c.vocab_size));
  return std::make_unique<CharTokenizer>(CharTokenizer::train(text));
}

nlohmann::json config_json(const LmTrainConfig& c) {
  nlohmann::json j;
  j["data"] = c.data;
  j["valid_fraction"] = c.valid_fraction;
  j["tokenizer"] = c.tokenizer;
  j["vocab_size"] = c.vocab_size;
  j["model"] = c.model;
  j["batch_size"] = c.batch_size;
  j["steps"] = c.steps;
  j["schedule"] = c.schedule;
  j["lr"] = c.lr;
  j["min_lr"] = c.min_lr;
  j["warmup_steps"] = c.warmup_steps;
  j["beta1"] = c.beta1;
  j["beta2"] = c.beta2;
  j["weight_decay"] = c.weight_decay;
  j["clip"] = c.clip;
  j["eval_every"] = c.eval_every;
  j["eval_windows"] = c.eval_windows;
  j["seed"] = c.seed;
  return j;
}

}  // namespace

Tensor window_loss(models::GPT& model, const Tensor& windows, Reduction reduction) {
  const int64_t T = windows.size(1) - 1;
  Tensor logits = model.forward(windows.narrow(1, 0, T).contiguous());
  return cross_entropy(logits.reshape({-1, logits.size(2)}),
                       windows.narrow(1, 1, T).contiguous().reshape({-1}), -100, 0.0, reduction);
}

LmLoss evaluate_lm(models::GPT& model, const Tensor& windows, const std::vector<int64_t>& units,
                   int64_t batch) {
  const bool was_training = model.is_training();
  model.eval();
  NoGrad no_grad;
  double nats = 0, unit_count = 0;
  int64_t tokens = 0;
  const int64_t n = windows.size(0), T = windows.size(1) - 1;
  const Device device = model.token_embedding->weight.device();
  for (int64_t start = 0; start < n; start += batch) {
    Tensor w = windows.narrow(0, start, std::min(batch, n - start));
    nats += window_loss(model, w.to(device), Reduction::sum).item();
    tokens += w.size(0) * T;
    for (int64_t id : w.narrow(1, 1, T).contiguous().to_vector<int64_t>())
      unit_count += double(units[size_t(id)]);
  }
  model.train(was_training);
  QKV_CHECK(tokens > 0, "evaluate_lm", "no validation windows");
  return {nats / double(tokens), nats / (std::log(2.0) * unit_count)};
}

LmTrainResult train_lm(const LmTrainConfig& config, const std::string& run_folder) {
  check_config(config);
  const LmText text = read_lm_text(config.data, config.valid_fraction);
  std::unique_ptr<LmTokenizer> tokenizer = make_tokenizer(config, text.train);
  LmTrainConfig c = config;
  c.model.vocab = tokenizer->vocab_size();

  TokenWindows train(tokenizer->encode(text.train), c.model.context,
                     text.path + ": training split");
  TokenWindows valid(tokenizer->encode(text.valid, /*allow_unknown=*/true), c.model.context,
                     text.path + ": validation split (--valid-fraction)");
  std::vector<int64_t> units(size_t(c.model.vocab));
  for (int64_t id = 0; id < c.model.vocab; ++id) units[size_t(id)] = tokenizer->units(id);

  std::filesystem::create_directories(run_folder);
  const std::filesystem::path dir(run_folder);
  save_lm_tokenizer(*tokenizer, (dir / "tokenizer.json").string());
  write_file_atomic((dir / "lm_config.json").string(), config_json(c).dump(2) + "\n");

  manual_seed(c.seed);  // the model's initial weights
  models::GPT model(c.model);
  model.train();
  nn::AdamW opt(nn::weight_decay_groups(model, c.weight_decay), c.lr,
                {.beta1 = c.beta1, .beta2 = c.beta2, .eps = 1e-8, .weight_decay = c.weight_decay});
  const nn::LrSchedule schedule{.kind = c.schedule,
                                .lr = c.lr,
                                .warmup_steps = c.warmup_steps,
                                .total_steps = c.steps,
                                .min_lr = c.min_lr,
                                .d_model = c.model.d_model};
  Generator batches(c.seed + 1);  // windows are drawn apart from the default generator (dropout)
  const Tensor valid_windows = valid.sequential_windows(c.eval_windows);

  LmTrainResult result;
  result.unit = tokenizer->unit();
  result.vocab = c.model.vocab;
  result.train_tokens = train.size();
  result.valid_tokens = valid.size();
  std::string metrics;
  double train_loss_sum = 0, train_seconds = 0;
  int64_t losses = 0;
  auto evaluate = [&](int64_t step) {
    LmLoss l = evaluate_lm(model, valid_windows, units, c.batch_size);
    LmEvaluation e{
        .step = step,
        .train_loss = losses ? train_loss_sum / double(losses) : l.nats_per_token,
        .loss = l.nats_per_token,
        .bits_per_unit = l.bits_per_unit,
        .perplexity = std::exp(l.nats_per_token),
        .tokens_per_second =
            train_seconds > 0 ? double(step * c.batch_size * c.model.context) / train_seconds : 0};
    result.evaluations.push_back(e);
    nlohmann::json j{{"step", e.step},
                     {"train_loss", e.train_loss},
                     {"valid_loss", e.loss},
                     {"bits_per_" + result.unit, e.bits_per_unit},
                     {"perplexity", e.perplexity},
                     {"tokens_per_second", e.tokens_per_second}};
    metrics += j.dump() + "\n";
    write_file_atomic((dir / "metrics.jsonl").string(), metrics);
    train_loss_sum = 0, losses = 0;
  };

  evaluate(0);
  for (int64_t step = 1; step <= c.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.scale_lr(schedule.factor(step));
    Tensor loss = window_loss(model, train.random_batch(c.batch_size, batches), Reduction::mean);
    const double value = loss.item();
    if (!std::isfinite(value))
      throw Error("train lm: the loss became non-finite at step " + std::to_string(step) +
                  " (try a lower --lr)");
    opt.zero_grad();
    loss.backward();
    if (c.clip > 0) nn::clip_grad_norm_(model.parameters(), c.clip);
    opt.step();
    train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    train_loss_sum += value, ++losses;
    if (step % c.eval_every == 0 || step == c.steps) evaluate(step);
  }
  nn::TensorMap weights;
  for (auto& [name, t] : model.state_dict()) weights[name] = t;
  nn::save_safetensors((dir / "model.safetensors").string(), weights);
  return result;
}

}  // namespace qkv::train
