// `qkv eval`, `qkv translate`: what a finished (or checkpointed) translation run folder can do.
// `qkv eval` also scores classification runs (model.json says which kind a run is).
#include <cstdio>

#include "train/commands/commands.h"
#include "train/commands/run_scoring.h"
#include "train/dataset.h"
#include "train/trainer/classifier.h"
#include "train/trainer/translator.h"

namespace qkv::cli {

int translate_command(const TranslateOptions& options) {
  train::Translator t = train::load_translator(options.run);
  t.check_inputs(options.texts, "translate");
  auto outputs = t.translate(options.texts, options.beam);
  for (size_t i = 0; i < outputs.size(); ++i)
    std::printf(options.texts.size() > 1 ? "%s\t%s\n" : "%.0s%s\n", options.texts[i].c_str(),
                outputs[i].c_str());
  return 0;
}

namespace {

int eval_classifier(const EvalOptions& options) {
  train::Classifier k = train::load_classifier(options.run);
  if (options.int8) load_int8_model(k.module(), options.run);
  // the test split is regenerated (or re-read) from the run's config
  train::ClassificationSet data = train::prepare_classification_set(k.config);
  double accuracy = k.accuracy(data, data.test);
  std::printf("test accuracy %.4f (%zu examples), %s%s\n", accuracy, data.test.size(),
              k.architecture().c_str(), options.int8 ? ", int8" : "");
  return 0;
}

}  // namespace

int eval_command(const EvalOptions& options) {
  if (train::run_architecture(options.run) != "Seq2SeqTransformer") return eval_classifier(options);
  train::Translator t = train::load_translator(options.run);
  if (options.int8) load_int8_model(*t.model, options.run);
  // the splits are regenerated from the run's config (same seed, same data)
  train::TranslationData data = train::prepare_translation_data(t.config);
  ExactMatch m = translation_exact_match(t, data, options.beam);
  std::printf("test exact match %.4f (%zu of %zu), %s decoding%s\n", m.fraction(), m.correct,
              m.total,
              options.beam > 1 ? ("beam " + std::to_string(options.beam)).c_str() : "greedy",
              options.int8 ? ", int8" : "");
  return 0;
}

}  // namespace qkv::cli
