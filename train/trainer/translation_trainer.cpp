#include "train/trainer/translation_trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "nn/optim.h"
#include "nn/safetensors.h"
#include "nn/schedule.h"
#include "train/atomic_file.h"
#include "train/batching.h"
#include "train/dataset.h"
#include "train/metrics.h"
#include "train/plots.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/trainer/attention_pictures.h"
#include "train/trainer/attention_stats.h"
#include "train/trainer/early_stopping.h"
#include "train/trainer/training_common.h"
#include "train/trainer/translator.h"

namespace qkv::train {

namespace {

struct Scores {
  double exact_match = 0, token_accuracy = 0;
};

// Greedy decoding of `examples` (at most `limit`) in batches, scored against their targets.
Scores evaluate(const Translator& t, const std::vector<Pair>& pairs, size_t limit) {
  std::vector<std::string> sources, predictions, references;
  std::vector<std::vector<int64_t>> pred_ids, ref_ids;
  const size_t n = std::min(limit, pairs.size());
  t.model->eval();
  for (size_t start = 0; start < n; start += 256) {
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
  return {exact_match(predictions, references), token_accuracy(pred_ids, ref_ids)};
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

TrainResult train_translation(const Config& config, bool resume) {
  validate_config(config);
  const EarlyStopping early_stopping(config, {"exact_match", "token_accuracy"});
  if (config.threads > 0) set_num_threads(int(config.threads));
  RunDir run(config.out);
  manual_seed(config.seed);

  TranslationData data = prepare_translation_data(config);
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

  auto opt = make_optimizer(config, t.model->parameters());
  nn::LrSchedule schedule = make_schedule(config);
  TrainerState state;
  // A resume that cannot go on (other data, a damaged checkpoint) fails before the run's files
  // are touched: the folder stays resumable with the right options.
  if (resume) {
    check_resumed_vocab(run, kSourceVocab, data.source_vocab);
    check_resumed_vocab(run, kTargetVocab, data.target_vocab);
    state = load_checkpoint(run, *t.model, *opt);
    default_generator().set_offset(state.generator_offset);
  }
  save_config(config, run.file("config.json"));
  data.source_vocab.save(run.file(kSourceVocab));
  data.target_vocab.save(run.file(kTargetVocab));
  save_model_json(run.file(kModelJson), t.model_config, t.decode_max_len);
  std::string summary = "model: " + std::to_string(t.model->num_parameters()) + " parameters; " +
                        std::to_string(data.train.size()) + " training pairs; vocab " +
                        std::to_string(data.source_vocab.size()) + " -> " +
                        std::to_string(data.target_vocab.size());
  std::printf("%s\n", summary.c_str());
  run.log(summary);

  BatchingOptions batching{.batch_size = config.batch_size,
                           .shuffle = true,
                           .bucket_by_length = config.bucket_by_length};
  ProgressBar bar;
  TrainResult result;
  const auto start = std::chrono::steady_clock::now();
  auto last_log = start;
  int64_t tokens_since_log = 0;
  std::optional<double> last_metric;
  bool stop = false;
  int64_t batches_to_skip = state.step;       // a resumed run replays the data order up to its step
  const int64_t first_step = state.step + 1;  // --trace prints the first batch this run trains on

  t.model->train();
  for (uint64_t epoch = 0; !stop && state.step < config.steps; ++epoch) {
    for (const auto& indices : plan_batches(data.train, batching, config.seed, epoch)) {
      if (batches_to_skip > 0) {
        --batches_to_skip;
        continue;
      }
      if (state.step >= config.steps || stop) break;
      ++state.step;
      Batch b = make_batch(data.train, indices, config.max_len);
      opt->set_lr(schedule.at(state.step));

      if (config.trace && state.step == first_step)
        trace_attention(batch_attention_stats(t, b), state.step, run);
      const uint64_t step_generator_offset = default_generator().offset();
      auto forward_backward = [&] {
        Tensor logits = t.model->forward(b.src.to(t.device), b.tgt_in.to(t.device),
                                         b.src_pad_mask.to(t.device), b.tgt_pad_mask.to(t.device));
        const int64_t vocab = logits.size(-1);
        Tensor loss =
            cross_entropy(logits.reshape({-1, vocab}), b.tgt_out.to(t.device).reshape({-1}),
                          Vocab::PAD, config.label_smoothing);
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
      tokens_since_log += b.target_tokens;

      if (state.step % config.log_every == 0 || state.step == 1) {
        double dt = seconds_since(last_log);
        last_log = std::chrono::steady_clock::now();
        double throughput = dt > 0 ? tokens_since_log / dt : 0;
        tokens_since_log = 0;
        auto attention = batch_attention_stats(t, b);
        run.append_metrics({{"step", state.step},
                            {"loss", loss_value},
                            {"lr", opt->lr()},
                            {"grad_norm", grad_norm},
                            {"tokens_per_second", throughput},
                            {"attention_entropy", entropy_record(attention)}});
        bar.update({.step = state.step,
                    .total = config.steps,
                    .loss = loss_value,
                    .metric = last_metric,
                    .metric_name = "exact",
                    .items_per_second = throughput,
                    .items_name = "tok"});
      }

      const bool last = state.step == config.steps;
      const bool evaluate_now =
          state.step % config.eval_every == 0 || last || interrupt_requested();
      if (!evaluate_now && config.checkpoint_every > 0 &&
          state.step % config.checkpoint_every == 0) {
        state.generator_offset = default_generator().offset();
        save_checkpoint(run, *t.model, *opt, state);
      }
      if (evaluate_now) {
        Scores s = evaluate(t, data.pairs.valid, 500);
        last_metric = s.exact_match;
        const std::string stop_reason = early_stopping.update(
            {{"exact_match", s.exact_match}, {"token_accuracy", s.token_accuracy}}, state);
        run.append_metrics({{"step", state.step},
                            {"valid_exact_match", s.exact_match},
                            {"valid_token_accuracy", s.token_accuracy}});
        char line[160];
        std::snprintf(line, sizeof line, "step %lld: valid exact match %.4f, token accuracy %.4f",
                      (long long)state.step, s.exact_match, s.token_accuracy);
        stop = finish_evaluation(config, run, bar, *t.model, *opt, state, line, "valid_exact_match",
                                 "training loss and validation exact match", stop_reason,
                                 result.interrupted);
      }
    }
  }
  bar.finish();
  result.steps = state.step;
  result.seconds = seconds_since(start);
  if (result.interrupted) return result;

  Scores test = evaluate(t, data.pairs.test, data.pairs.test.size());
  result.test_exact_match = test.exact_match;
  result.test_token_accuracy = test.token_accuracy;
  run.append_metrics({{"step", state.step},
                      {"test_exact_match", test.exact_match},
                      {"test_token_accuracy", test.token_accuracy},
                      {"train_seconds", result.seconds}});
  std::printf(
      "\ntest: exact match %.4f, token accuracy %.4f (%zu examples) after %lld steps, %.0f s\n",
      test.exact_match, test.token_accuracy, data.pairs.test.size(), (long long)state.step,
      result.seconds);
  std::vector<std::string> examples;
  for (size_t i = 0; i < std::min<size_t>(5, data.pairs.test.size()); ++i)
    examples.push_back(data.pairs.test[i].source);
  auto outputs = t.translate(examples);
  for (size_t i = 0; i < examples.size(); ++i)
    std::printf("  %-32s -> %s\n", ("\"" + examples[i] + "\"").c_str(), outputs[i].c_str());
  if (config.pictures && !examples.empty()) {
    t.model->eval();
    auto maps = write_attention_maps(t, examples[0], run.file("attention"));
    std::printf("attention maps: %s/ (%zu files)\n", run.file("attention").c_str(), maps.size());
    std::printf("loss curve:     %s\n", run.file("loss.png").c_str());
  }
  std::printf("run folder:     %s\n", run.path().c_str());
  return result;
}

}  // namespace qkv::train
