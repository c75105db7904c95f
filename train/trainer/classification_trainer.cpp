#include "train/trainer/classification_trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "train/batching.h"
#include "train/dataset.h"
#include "train/plots.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/trainer/attention_stats.h"
#include "train/trainer/classification_pictures.h"
#include "train/trainer/classifier.h"
#include "train/trainer/early_stopping.h"
#include "train/trainer/training_common.h"

namespace qkv::train {

namespace {

// Attention statistics of (up to 16 examples of) a batch, for the transformer classifiers (the
// CNN has no attention layers: none). Eval mode, no graph, weights recorded.
std::vector<AttentionLayerStats> batch_attention_stats(const Classifier& k,
                                                       const ClassifierBatch& b) {
  if (!k.text && !k.vit) return {};
  NoGrad no_grad;
  const int64_t n = std::min<int64_t>(16, b.inputs.size(0));
  ClassifierBatch few{b.inputs.narrow(0, 0, n),
                      b.pad_mask.defined() ? b.pad_mask.narrow(0, 0, n) : Tensor(),
                      b.labels.narrow(0, 0, n)};
  k.module().eval();
  if (k.text) k.text->set_record_attention(true);
  if (k.vit) k.vit->set_record_attention(true);
  k.forward(few);
  auto maps = k.text ? k.text->attention_maps() : k.vit->attention_maps();
  if (k.text) k.text->set_record_attention(false);
  if (k.vit) k.vit->set_record_attention(false);
  k.module().train();
  // Text pads queries and keys alike; image patches (and the class token) are never padding. A
  // [CLS] token the text model puts first is not padding either.
  Tensor pad = few.pad_mask;
  if (pad.defined() && !maps.empty() && maps.front().weights.size(2) == pad.size(1) + 1)
    pad = cat({zeros({n, 1}, {DType::b8}), pad.to(Device::cpu())}, 1);
  return attention_stats_of(maps, [&](const std::string&) { return std::pair{pad, pad}; });
}

}  // namespace

TrainResult train_classification(const Config& config, bool resume) {
  validate_config(config);
  QKV_CHECK(task_kind(config.task) != TaskKind::translation, "--task", "'", config.task,
            "' is a translation task: use `qkv train translate`");
  const EarlyStopping early_stopping(config, {"accuracy"});
  if (config.threads > 0) set_num_threads(int(config.threads));
  RunDir run(config.out);
  manual_seed(config.seed);

  ClassificationSet data = prepare_classification_set(config);
  Classifier k = make_classifier(config, data);
  nn::Module& model = k.module();

  auto opt = make_optimizer(config, model.parameters());
  nn::LrSchedule schedule = make_schedule(config);
  TrainerState state;
  // A resume that cannot go on (other data, a damaged checkpoint) fails before the run's files
  // are touched: the folder stays resumable with the right options.
  if (resume) {
    if (k.text) check_resumed_vocab(run, "vocab.json", k.vocab);
    state = load_checkpoint(run, model, *opt);
    default_generator().set_offset(state.generator_offset);
  }
  save_config(config, run.file("config.json"));
  save_classifier_files(k, run.path());
  std::string summary = "model: " + k.architecture() + ", " +
                        std::to_string(model.num_parameters()) + " parameters; " +
                        std::to_string(data.train.size()) + " training examples, " +
                        std::to_string(data.labels.size()) + " classes";
  std::printf("%s\n", summary.c_str());
  run.log(summary);

  // Images all have the same size: bucketing by length would only cost a sort.
  BatchingOptions batching{.batch_size = config.batch_size,
                           .shuffle = true,
                           .bucket_by_length = config.bucket_by_length && !data.images};
  const char* items = data.images ? "img" : "ex";
  ProgressBar bar;
  TrainResult result;
  const auto start = std::chrono::steady_clock::now();
  auto last_log = start;
  int64_t examples_since_log = 0;
  std::optional<double> last_metric;
  bool stop = false;
  int64_t batches_to_skip = state.step;       // a resumed run replays the data order up to its step
  const int64_t first_step = state.step + 1;  // --trace prints the first batch this run trains on

  model.train();
  for (uint64_t epoch = 0; !stop && state.step < config.steps; ++epoch) {
    for (const auto& indices : plan_batches(data.train, batching, config.seed, epoch)) {
      if (batches_to_skip > 0) {
        --batches_to_skip;
        continue;
      }
      if (state.step >= config.steps || stop) break;
      ++state.step;
      ClassifierBatch b = make_classifier_batch(data, data.train, indices, config.max_len);
      opt->set_lr(schedule.at(state.step));

      if (config.trace && state.step == first_step)
        trace_attention(batch_attention_stats(k, b), state.step, run);
      const uint64_t step_generator_offset = default_generator().offset();
      auto forward_backward = [&] {
        Tensor logits = k.forward(b);
        Tensor loss = cross_entropy(logits, b.labels.to(k.device), /*ignore_index=*/-100,
                                    config.label_smoothing);
        opt->zero_grad();
        loss.backward();
        return loss;
      };
      Tensor loss = forward_backward();
      double grad_norm =
          nn::clip_grad_norm_(opt->params(), config.clip > 0 ? config.clip : INFINITY);
      double loss_value = loss.item();
      if (!std::isfinite(loss_value) || !std::isfinite(grad_norm))
        throw Error(non_finite_step_message(
            std::isfinite(loss_value) ? "gradient norm" : "loss", state.step, run,
            name_the_non_finite_op(step_generator_offset, [&] { forward_backward(); })));
      opt->step();
      examples_since_log += int64_t(indices.size());

      if (state.step % config.log_every == 0 || state.step == 1) {
        double dt = seconds_since(last_log);
        last_log = std::chrono::steady_clock::now();
        double throughput = dt > 0 ? examples_since_log / dt : 0;
        examples_since_log = 0;
        nlohmann::json record = {{"step", state.step},
                                 {"loss", loss_value},
                                 {"lr", opt->lr()},
                                 {"grad_norm", grad_norm},
                                 {"examples_per_second", throughput}};
        auto attention = batch_attention_stats(k, b);
        if (!attention.empty()) record["attention_entropy"] = entropy_record(attention);
        run.append_metrics(record);
        bar.update({.step = state.step,
                    .total = config.steps,
                    .loss = loss_value,
                    .metric = last_metric,
                    .metric_name = "acc",
                    .items_per_second = throughput,
                    .items_name = items});
      }

      const bool last = state.step == config.steps;
      const bool evaluate_now =
          state.step % config.eval_every == 0 || last || interrupt_requested();
      if (!evaluate_now && config.checkpoint_every > 0 &&
          state.step % config.checkpoint_every == 0) {
        state.generator_offset = default_generator().offset();
        save_checkpoint(run, model, *opt, state);
      }
      if (evaluate_now) {
        double accuracy = k.accuracy(data, data.valid);
        last_metric = accuracy;
        const std::string stop_reason = early_stopping.update({{"accuracy", accuracy}}, state);
        run.append_metrics({{"step", state.step}, {"valid_accuracy", accuracy}});
        char line[120];
        std::snprintf(line, sizeof line, "step %lld: valid accuracy %.4f", (long long)state.step,
                      accuracy);
        stop = finish_evaluation(config, run, bar, model, *opt, state, line, "valid_accuracy",
                                 "training loss and validation accuracy", stop_reason,
                                 result.interrupted);
      }
    }
  }
  bar.finish();
  result.steps = state.step;
  result.seconds = seconds_since(start);
  if (result.interrupted) return result;

  result.test_accuracy = k.accuracy(data, data.test);
  run.append_metrics({{"step", state.step},
                      {"test_accuracy", result.test_accuracy},
                      {"train_seconds", result.seconds}});
  char line[160];
  std::snprintf(line, sizeof line, "test: accuracy %.4f (%zu examples) after %lld steps, %.0f s",
                result.test_accuracy, data.test.size(), (long long)state.step, result.seconds);
  std::printf("\n%s\n", line);
  run.log(line);
  if (config.pictures) {
    auto pictures = write_classifier_pictures(k, data, run.path());
    for (const auto& p : pictures) std::printf("picture:    %s\n", p.c_str());
    std::printf("loss curve: %s\n", run.file("loss.png").c_str());
  }
  std::printf("run folder: %s\n", run.path().c_str());
  return result;
}

}  // namespace qkv::train
