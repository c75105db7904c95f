#include "train/trainer/classification_trainer.h"

#include <cstdio>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/process_group.h"
#include "train/batching.h"
#include "train/dataset.h"
#include "train/run_dir.h"
#include "train/scaled_defaults.h"
#include "train/trainer/attention_stats.h"
#include "train/trainer/classification_pictures.h"
#include "train/trainer/classifier.h"
#include "train/trainer/early_stopping.h"
#include "train/trainer/resume.h"
#include "train/trainer/sharded_evaluation.h"
#include "train/trainer/training_loop.h"
#include "train/trainer/training_run.h"

namespace qkv::train {

namespace {

// Accuracy on `split`, each rank scoring its share (sharded_evaluation.h).
double sharded_accuracy(const Classifier& k, const ClassificationSet& data,
                        const std::vector<Example>& split) {
  ProcessGroup& group = *ProcessGroup::from_environment();
  const auto [first, end] = evaluation_share(split.size(), group);
  const std::vector<Example> share(split.begin() + first, split.begin() + end);
  const int64_t n = int64_t(share.size());
  const std::vector<int64_t> c =
      sum_counts({n == 0 ? 0 : count_of(k.accuracy(data, share), n), n}, group);
  return c[1] == 0 ? 0.0 : double(c[0]) / double(c[1]);
}

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

namespace {
TrainResult train_classification_on_this_rank(const Config& requested, RunMode mode) {
  TrainingRun training(requested, mode);
  QKV_CHECK(task_kind(requested.task) != TaskKind::translation, "--task", "'", requested.task,
            "' is a translation task: use `qkv train translate`");
  const Config& config = training.config();
  const EarlyStopping early_stopping(config, {"accuracy"});

  ClassificationSet data = prepare_classification_set(config);
  training.set_run_length(
      choose_run_length(config, data.train.size(), data.images ? "images" : "examples"));
  Classifier k = make_classifier(config, data);
  nn::Module& model = k.module();

  training.open(model, model_config_json(k), [&](RunDir& folder, const std::string&) {
    if (k.text) check_resumed_vocab(folder, "vocab.json", k.vocab);
  });
  const TrainerState& state = training.state();
  RunDir& run = training.run();
  save_classifier_files(k, run.path());
  training.announce("model: " + k.architecture() + ", " + std::to_string(model.num_parameters()) +
                    " parameters; " + std::to_string(data.train.size()) + " training examples, " +
                    std::to_string(data.labels.size()) + " classes");

  // Images all have the same size: bucketing by length would only cost a sort.
  const BatchingOptions batching{.batch_size = config.batch_size,
                                 .shuffle = true,
                                 .bucket_by_length = config.bucket_by_length && !data.images};
  ClassifierBatch b;
  int64_t batch_examples = 0;
  TrainingHooks hooks;
  hooks.plan_epoch = [&](uint64_t epoch) {
    return plan_batches(data.train, batching, config.seed, epoch);
  };
  hooks.load_batch = [&](const std::vector<size_t>& indices) {
    b = make_classifier_batch(data, data.train, indices, config.max_len);
    batch_examples = int64_t(indices.size());
  };
  hooks.loss = [&] {
    return cross_entropy(k.forward(b), b.labels.to(k.device), /*ignore_index=*/-100,
                         config.label_smoothing);
  };
  hooks.loss_terms = [&] { return batch_examples; };
  hooks.summed_loss = [&](double global_terms) {
    Tensor sum = cross_entropy(k.forward(b), b.labels.to(k.device), /*ignore_index=*/-100,
                               config.label_smoothing, Reduction::sum);
    return div(sum, full_like(sum, global_terms));
  };
  hooks.batch_items = [&] { return batch_examples; };
  hooks.attention_stats = [&] { return batch_attention_stats(k, b); };
  hooks.evaluate = [&] {
    const double accuracy = sharded_accuracy(k, data, data.valid);
    char line[120];
    std::snprintf(line, sizeof line, "step %lld: valid accuracy %.4f", (long long)state.step,
                  accuracy);
    return Evaluation{.metrics = {{"accuracy", accuracy}},
                      .headline = accuracy,
                      .record = {{"valid_accuracy", accuracy}},
                      .line = line};
  };
  hooks.metric_label = "acc";
  hooks.items_label = data.images ? "img" : "ex";
  hooks.throughput_key = "examples_per_second";
  hooks.valid_key = "valid_accuracy";
  hooks.curve_title = "training loss and validation accuracy";

  TrainResult result = training.train(model, early_stopping, hooks);
  if (result.interrupted) return result;

  const ModelWeights tested = training.use_model_for_test(model);
  result.test_accuracy = sharded_accuracy(k, data, data.test);
  run.append_metrics({{"step", state.step},
                      {"test_weights", tested.file},
                      {"test_accuracy", result.test_accuracy},
                      {"train_seconds", result.seconds}});
  char line[320];
  std::snprintf(line, sizeof line,
                "test: accuracy %.4f (%zu examples) after %lld steps, %.0f s; weights %s",
                result.test_accuracy, data.test.size(), (long long)state.step, result.seconds,
                tested.describe().c_str());
  training.report_test(line);
  std::vector<std::string> pictures;
  if (config.pictures)
    for (const auto& p : write_classifier_pictures(k, data, run.path()))
      pictures.push_back("picture:        " + p);
  return training.finish(result, pictures);
}

}  // namespace

TrainResult train_classification(const Config& requested, RunMode mode) {
  return run_on_this_rank([&] { return train_classification_on_this_rank(requested, mode); });
}

}  // namespace qkv::train
