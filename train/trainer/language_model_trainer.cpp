#include "train/trainer/language_model_trainer.h"

#include <cmath>
#include <cstdio>

#include "engine/error.h"
#include "engine/random.h"
#include "train/lm_data.h"
#include "train/tasks/task_table.h"
#include "train/trainer/checkpoint.h"
#include "train/trainer/language_model_run.h"
#include "train/trainer/lm_trainer.h"
#include "train/trainer/rank_run_dir.h"
#include "train/trainer/run_choices.h"
#include "train/trainer/training_run.h"
#include "train/trainer/translator.h"

namespace qkv::train {

Config language_model_defaults() {
  Config c;
  c.task = "lm";
  c.layers = 4, c.dropout = 0.0, c.positional = "learned";
  c.batch_size = 12, c.steps = 2000, c.warmup = 100;
  c.beta2 = 0.99, c.weight_decay = 0.1;
  c.valid_size = 64;  // validation windows per evaluation
  c.out = "runs/lm";
  return c;
}

namespace {

// The window starts of every batch of one "epoch" (as many batches as cover the training text
// once): row r of batch b draws counter (epoch * batches + b) * batch_size + r of a generator
// seeded apart from the model's (dropout draws from the default generator).
std::vector<std::vector<size_t>> plan_windows(const Config& c, const TokenWindows& train,
                                              uint64_t epoch) {
  const int64_t starts = train.size() - train.context();
  const int64_t batches = std::max<int64_t>(1, train.size() / (c.batch_size * c.context));
  const uint64_t seed = c.seed + 1;
  std::vector<std::vector<size_t>> plan(static_cast<size_t>(batches));
  for (int64_t b = 0; b < batches; ++b) {
    const uint64_t first = (epoch * uint64_t(batches) + uint64_t(b)) * uint64_t(c.batch_size);
    for (int64_t r = 0; r < c.batch_size; ++r) {
      const double u = philox::uniform(seed, first + uint64_t(r));
      plan[size_t(b)].push_back(size_t(std::min(starts - 1, int64_t(u * double(starts)))));
    }
  }
  return plan;
}

Tensor windows_at(const TokenWindows& text, const std::vector<size_t>& starts) {
  const int64_t width = text.context() + 1;
  std::vector<int64_t> ids(starts.size() * size_t(width));
  for (size_t r = 0; r < starts.size(); ++r)
    std::copy_n(text.ids().begin() + int64_t(starts[r]), width, ids.begin() + int64_t(r) * width);
  return tensor_i64(ids, {int64_t(starts.size()), width});
}

// "--resume: the tokenizer trained on the data is not the run's tokenizer.json ...".
void check_resumed_tokenizer(const std::string& folder, const LmTokenizer& from_data) {
  const std::string path = folder + "/" + kTokenizerJson;
  const std::unique_ptr<LmTokenizer> saved = load_lm_tokenizer(path);
  QKV_CHECK(saved->to_json() == from_data.to_json(), "--resume", "the ", from_data.kind(),
            " tokenizer trained on the data (", from_data.vocab_size(),
            " tokens) is not the one in ", path, " (", saved->vocab_size(),
            " tokens) that the checkpoint was trained with; resume with the run's own --data");
}

TrainResult train_language_model_on_this_rank(const Config& requested, RunMode mode) {
  TrainingRun training(requested, mode);
  QKV_CHECK(task_definition(requested.task).kind == TaskKind::language_model, "--task", "'",
            requested.task,
            "' is not a language-model task: use `qkv train translate` or `qkv train classify`");
  QKV_CHECK(!requested.data.empty(), "--data",
            "qkv train lm needs a UTF-8 text file (--data FILE)");
  const Config& config = training.config();
  const EarlyStopping early_stopping(config, {"valid_loss"}, Better::lower);

  const LmText text = read_lm_text(config.data, config.valid_fraction);
  const std::unique_ptr<LmTokenizer> tokenizer = train_lm_tokenizer(config, text.train);
  const TokenWindows train(tokenizer->encode(text.train), config.context,
                           text.path + ": training split");
  const TokenWindows valid(tokenizer->encode(text.valid, /*allow_unknown=*/true), config.context,
                           text.path + ": validation split (--valid-fraction)");
  const Tensor valid_windows = valid.sequential_windows(config.valid_size);
  std::vector<int64_t> units(size_t(tokenizer->vocab_size()));
  for (int64_t id = 0; id < tokenizer->vocab_size(); ++id) units[size_t(id)] = tokenizer->units(id);

  const models::GPTConfig model_config = gpt_config(config, tokenizer->vocab_size());
  const Device device = parse_device(config.device);
  models::GPT model(model_config);
  if (!device.is_cpu()) model.to(device);
  training.open(model, nlohmann::json(model_config), [&](RunDir&, const std::string& source) {
    check_resumed_tokenizer(source, *tokenizer);
  });
  const TrainerState& state = training.state();
  RunDir& run = training.run();
  save_lm_tokenizer(*tokenizer, run.file(kTokenizerJson));
  save_gpt_model_json(run.file(kModelJson), model_config);
  training.announce("model: " + std::to_string(model.num_parameters()) + " parameters; " +
                    std::to_string(train.size()) + " training and " + std::to_string(valid.size()) +
                    " validation tokens; " + tokenizer->kind() + " vocab " +
                    std::to_string(tokenizer->vocab_size()));

  const std::string bits_key = "bits_per_" + tokenizer->unit();
  Tensor batch;
  TrainingHooks hooks;
  hooks.plan_epoch = [&](uint64_t epoch) { return plan_windows(config, train, epoch); };
  hooks.load_batch = [&](const std::vector<size_t>& starts) {
    batch = windows_at(train, starts).to(device);
  };
  hooks.loss = [&] { return window_loss(model, batch, Reduction::mean); };
  hooks.loss_terms = [&] { return batch.size(0) * config.context; };
  hooks.summed_loss = [&](double global_terms) {
    Tensor sum = window_loss(model, batch, Reduction::sum);
    return div(sum, full_like(sum, global_terms));
  };
  hooks.batch_items = [&] { return batch.size(0) * config.context; };
  hooks.attention_stats = [] { return std::vector<AttentionLayerStats>{}; };
  hooks.evaluate = [&] {
    const LmLoss l = evaluate_lm(model, valid_windows, units, config.batch_size);
    char line[200];
    std::snprintf(line, sizeof line, "step %lld: valid loss %.4f, %.4f %s, perplexity %.3f",
                  (long long)state.step, l.nats_per_token, l.bits_per_unit, bits_key.c_str(),
                  std::exp(l.nats_per_token));
    // Early stopping and best.safetensors keep the lowest validation loss.
    return Evaluation{.metrics = {{"valid_loss", l.nats_per_token}},
                      .headline = l.nats_per_token,
                      .record = {{"valid_loss", l.nats_per_token},
                                 {bits_key, l.bits_per_unit},
                                 {"perplexity", std::exp(l.nats_per_token)}},
                      .line = line};
  };
  hooks.metric_label = "val";
  hooks.items_label = "tok";
  hooks.throughput_key = "tokens_per_second";
  hooks.valid_key = "valid_loss";
  hooks.curve_title = "training and validation loss (nats per token)";

  const TrainResult result = training.train(model, early_stopping, hooks);
  if (result.interrupted) return result;
  std::printf("\ntrained %lld steps in %.0f s\n", (long long)state.step, result.seconds);
  return training.finish(result, {});
}

}  // namespace

TrainResult train_language_model(const Config& requested, RunMode mode) {
  return run_on_this_rank([&] { return train_language_model_on_this_rank(requested, mode); });
}

}  // namespace qkv::train
