#include "train/trainer/translation_trainer.h"

#include <cstdio>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/process_group.h"
#include "train/batching.h"
#include "train/dataset.h"
#include "train/metrics.h"
#include "train/run_dir.h"
#include "train/scaled_defaults.h"
#include "train/trainer/attention_pictures.h"
#include "train/trainer/attention_stats.h"
#include "train/trainer/early_stopping.h"
#include "train/trainer/resume.h"
#include "train/trainer/sharded_evaluation.h"
#include "train/trainer/training_loop.h"
#include "train/trainer/training_run.h"
#include "train/trainer/translator.h"
#include "train/utf8.h"

namespace qkv::train {

namespace {

struct Scores {
  double exact_match = 0, token_accuracy = 0;
};

// Greedy decoding of `examples` (at most `limit`) in batches, scored against their targets. Under
// mpirun each rank decodes its share and the counts are all-reduced (sharded_evaluation.h).
Scores evaluate(const Translator& t, const std::vector<Pair>& pairs, size_t limit) {
  std::vector<std::string> sources, predictions, references;
  std::vector<std::vector<int64_t>> pred_ids, ref_ids;
  ProcessGroup& group = *ProcessGroup::from_environment();
  const auto [first, n] = evaluation_share(std::min(limit, pairs.size()), group);
  t.model->eval();
  for (size_t start = first; start < n; start += 256) {
    std::vector<std::string> chunk;
    for (size_t i = start; i < std::min(n, start + 256); ++i) chunk.push_back(pairs[i].source);
    std::vector<std::vector<int64_t>> ids;
    auto out = t.translate(chunk, 1, &ids);
    for (size_t k = 0; k < out.size(); ++k) {
      predictions.push_back(out[k]);
      const Pair& p = pairs[start + k];
      references.push_back(t.target_vocab.decode(t.target_vocab.encode(p.target)));
      std::vector<int64_t> pred(ids[k].begin() + 1, ids[k].end());  // drop BOS
      auto eos = std::find(pred.begin(), pred.end(), Vocab::EOS);
      pred.erase(eos, pred.end());
      pred_ids.push_back(pred);
      ref_ids.push_back(t.target_vocab.encode(p.target));
    }
  }
  t.model->train();
  // whole numbers: how many were right of how many, for this share
  const int64_t examples = int64_t(references.size());
  int64_t tokens = 0;  // token_accuracy's denominator: the longer of prediction and reference
  for (size_t i = 0; i < ref_ids.size(); ++i)
    tokens += int64_t(std::max(pred_ids[i].size(), ref_ids[i].size()));
  const std::vector<int64_t> c =
      sum_counts({count_of(exact_match(predictions, references), examples), examples,
                  count_of(token_accuracy(pred_ids, ref_ids), tokens), tokens},
                 group);
  return {c[1] == 0 ? 0.0 : double(c[0]) / double(c[1]),
          c[3] == 0 ? 0.0 : double(c[2]) / double(c[3])};
}

}  // namespace

namespace {

// Attention statistics of (up to 16 examples of) a batch: a forward in eval mode without a graph
// and with the weights recorded, so training itself keeps its fast attention path.
std::vector<AttentionLayerStats> batch_attention_stats(const Translator& t, const Batch& b) {
  NoGrad no_grad;
  const int64_t n = std::min<int64_t>(16, b.src.size(0));
  Tensor src = b.src.narrow(0, 0, n).to(t.device), tgt = b.tgt_in.narrow(0, 0, n).to(t.device);
  Tensor src_pad = b.src_pad_mask.narrow(0, 0, n), tgt_pad = b.tgt_pad_mask.narrow(0, 0, n);
  t.model->eval();
  t.model->set_record_attention(true);
  t.model->forward(src, tgt, src_pad.to(t.device), tgt_pad.to(t.device));
  auto maps = t.model->attention_maps();
  t.model->set_record_attention(false);
  t.model->train();
  return attention_stats_of(maps, [&](const std::string& name) {
    const bool encoder = name.rfind("encoder", 0) == 0;
    const bool cross = name.size() > 6 && name.compare(name.size() - 6, 6, ".cross") == 0;
    return std::pair{encoder ? src_pad : tgt_pad, encoder || cross ? src_pad : tgt_pad};
  });
}

}  // namespace

namespace {
TrainResult train_translation_on_this_rank(const Config& requested, RunMode mode) {
  TrainingRun training(requested, mode);
  const Config& config = training.config();
  const EarlyStopping early_stopping(config, {"exact_match", "token_accuracy"});

  TranslationData data = prepare_translation_data(config);
  training.note(data.tokenizer_line);
  training.set_run_length(choose_run_length(config, data.train.size(), "pairs"));
  size_t longest_target = 0;
  for (const auto& e : data.train) longest_target = std::max(longest_target, e.tgt.size());

  Translator t;
  t.config = config;
  t.source_vocab = data.source_vocab;
  t.target_vocab = data.target_vocab;
  t.model_config = seq2seq_config(config, data.source_vocab.size(), data.target_vocab.size());
  t.decode_max_len = int64_t(longest_target) + 8;
  t.device = parse_device(config.device);
  t.model = std::make_shared<models::Seq2SeqTransformer>(t.model_config);
  if (!t.device.is_cpu()) t.model->to(t.device);

  training.open(*t.model, nlohmann::json(t.model_config), [&](RunDir& folder, const std::string&) {
    check_resumed_vocab(folder, kSourceVocab, data.source_vocab);
    check_resumed_vocab(folder, kTargetVocab, data.target_vocab);
  });
  const TrainerState& state = training.state();
  RunDir& run = training.run();
  data.source_vocab.save(run.file(kSourceVocab));
  data.target_vocab.save(run.file(kTargetVocab));
  save_model_json(run.file(kModelJson), t.model_config, t.decode_max_len);
  training.announce("model: " + std::to_string(t.model->num_parameters()) + " parameters; " +
                    std::to_string(data.train.size()) + " training pairs; vocab " +
                    std::to_string(data.source_vocab.size()) + " -> " +
                    std::to_string(data.target_vocab.size()));

  const BatchingOptions batching{.batch_size = config.batch_size,
                                 .shuffle = true,
                                 .bucket_by_length = config.bucket_by_length};
  Batch b;
  TrainingHooks hooks;
  hooks.plan_epoch = [&](uint64_t epoch) {
    return plan_batches(data.train, batching, config.seed, epoch);
  };
  hooks.load_batch = [&](const std::vector<size_t>& indices) {
    b = make_batch(data.train, indices, config.max_len);
  };
  hooks.loss = [&] {
    Tensor logits = t.model->forward(b.src.to(t.device), b.tgt_in.to(t.device),
                                     b.src_pad_mask.to(t.device), b.tgt_pad_mask.to(t.device));
    const int64_t vocab = logits.size(-1);
    return cross_entropy(logits.reshape({-1, vocab}), b.tgt_out.to(t.device).reshape({-1}),
                         Vocab::PAD, config.label_smoothing);
  };
  hooks.loss_terms = [&] { return b.target_tokens; };
  hooks.summed_loss = [&](double global_terms) {
    Tensor logits = t.model->forward(b.src.to(t.device), b.tgt_in.to(t.device),
                                     b.src_pad_mask.to(t.device), b.tgt_pad_mask.to(t.device));
    const int64_t vocab = logits.size(-1);
    Tensor sum = cross_entropy(logits.reshape({-1, vocab}), b.tgt_out.to(t.device).reshape({-1}),
                               Vocab::PAD, config.label_smoothing, Reduction::sum);
    return div(sum, full_like(sum, global_terms));
  };
  hooks.batch_items = [&] { return b.target_tokens; };
  hooks.attention_stats = [&] { return batch_attention_stats(t, b); };
  hooks.evaluate = [&] {
    const Scores s = evaluate(t, data.pairs.valid, 500);
    char line[160];
    std::snprintf(line, sizeof line, "step %lld: valid exact match %.4f, token accuracy %.4f",
                  (long long)state.step, s.exact_match, s.token_accuracy);
    return Evaluation{
        .metrics = {{"exact_match", s.exact_match}, {"token_accuracy", s.token_accuracy}},
        .headline = s.exact_match,
        .record = {{"valid_exact_match", s.exact_match},
                   {"valid_token_accuracy", s.token_accuracy}},
        .line = line};
  };
  hooks.metric_label = "exact";
  hooks.items_label = "tok";
  hooks.throughput_key = "tokens_per_second";
  hooks.valid_key = "valid_exact_match";
  hooks.curve_title = "training loss and validation exact match";

  TrainResult result = training.train(*t.model, early_stopping, hooks);
  if (result.interrupted) return result;

  const ModelWeights tested = training.use_model_for_test(*t.model);
  Scores test = evaluate(t, data.pairs.test, data.pairs.test.size());
  result.test_exact_match = test.exact_match;
  result.test_token_accuracy = test.token_accuracy;
  run.append_metrics({{"step", state.step},
                      {"test_weights", tested.file},
                      {"test_exact_match", test.exact_match},
                      {"test_token_accuracy", test.token_accuracy},
                      {"train_seconds", result.seconds}});
  char line[320];
  std::snprintf(line, sizeof line,
                "test: exact match %.4f, token accuracy %.4f (%zu examples) after %lld steps, "
                "%.0f s; weights %s",
                test.exact_match, test.token_accuracy, data.pairs.test.size(),
                (long long)state.step, result.seconds, tested.describe().c_str());
  training.report_test(line);
  std::vector<std::string> examples;
  for (size_t i = 0; i < std::min<size_t>(5, data.pairs.test.size()); ++i)
    examples.push_back(data.pairs.test[i].source);
  t.model->eval();  // evaluate() put it back in training mode: decode without dropout
  auto outputs = t.translate(examples);
  for (size_t i = 0; i < examples.size(); ++i)
    result.examples.emplace_back(examples[i], outputs[i]);
  for (size_t i = 0; i < examples.size(); ++i)
    std::printf("  %s -> %s\n", pad_right("\"" + examples[i] + "\"", 32).c_str(),
                outputs[i].c_str());
  std::vector<std::string> pictures;
  if (config.pictures && !examples.empty()) {
    auto maps = write_attention_maps(t, examples[0], run.file("attention"));
    pictures.push_back("attention maps: " + run.file("attention") + "/ (" +
                       std::to_string(maps.size()) + " files)");
  }
  return training.finish(result, pictures);
}

}  // namespace

TrainResult train_translation(const Config& requested, RunMode mode) {
  return run_on_this_rank([&] { return train_translation_on_this_rank(requested, mode); });
}

}  // namespace qkv::train
