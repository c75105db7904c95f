// `qkv eval`, `qkv translate`: what a finished (or checkpointed) translation run folder can do.
// `qkv eval` also scores classification runs (model.json says which kind a run is).
#include <cstdio>

#include "engine/autocast.h"
#include "engine/backend.h"
#include "engine/error.h"
#include "train/commands/commands.h"
#include "train/commands/run_scoring.h"
#include "train/dataset.h"
#include "train/trainer/best_model.h"
#include "train/trainer/classifier.h"
#include "train/trainer/precision.h"
#include "train/trainer/translator.h"

namespace qkv::cli {

namespace {

// --device for a loaded run, checked before any work: the device must have a backend (so
// "--device cuda" without a GPU says so at once), and int8 Linear layers are CPU kernels.
Device checked_device(const std::string& name, bool int8) {
  const Device device = train::parse_device(name);
  QKV_CHECK(device.is_cpu() || !int8, "--int8",
            "int8 Linear layers run on the CPU only; leave out --device ", name);
  if (!device.is_cpu()) backend_for(device);  // throws "device: cuda:0 is not available: ..."
  return device;
}

// One warning line per text holding tokens the model never saw in training: they all read as
// <unk>, so the translation cannot depend on them.
void warn_unknown_tokens(const std::vector<std::string>& texts, const train::Vocab& vocab) {
  const char* what = vocab.kind() == train::TokenizerKind::character ? "character" : "word";
  for (size_t i = 0; i < texts.size(); ++i) {
    std::string unknown;
    size_t count = 0;
    for (const std::string& token : train::tokenize(texts[i], vocab.kind())) {
      if (vocab.id(token) != train::Vocab::UNK) continue;
      if (++count <= 5) unknown += (unknown.empty() ? "'" : ", '") + token + "'";
    }
    if (count == 0) continue;
    std::fprintf(
        stderr,
        "qkv: warning: text %zu has %zu %s%s outside the vocabulary (%s%s); they read as <unk>\n",
        i + 1, count, what, count == 1 ? "" : "s", unknown.c_str(), count > 5 ? ", ..." : "");
  }
}

}  // namespace

int translate_command(const TranslateOptions& options) {
  const Device device = checked_device(options.device, false);
  train::Translator t = train::load_translator(
      options.run, train::choose_model_weights(options.run, options.last).file);
  t.move_to(device);
  t.check_inputs(options.texts, "translate");
  warn_unknown_tokens(options.texts, t.source_vocab);
  auto outputs = t.translate(options.texts, options.beam);
  for (size_t i = 0; i < outputs.size(); ++i)
    std::printf(options.texts.size() > 1 ? "%s\t%s\n" : "%.0s%s\n", options.texts[i].c_str(),
                outputs[i].c_str());
  return 0;
}

namespace {

// The weights `qkv eval` scores: the best or the last (--last); an int8 model is scored over the
// float weights it was quantized from.
train::ModelWeights evaluated_weights(const EvalOptions& options) {
  train::ModelWeights weights = train::choose_model_weights(options.run, options.last);
  if (options.int8) check_int8_source(options.run, weights.file);
  return weights;
}

EvalReport evaluate_classifier(const EvalOptions& options, Device device) {
  const train::ModelWeights weights = evaluated_weights(options);
  train::Classifier k = train::load_classifier(options.run, weights.file);
  if (options.int8) load_int8_model(k.module(), options.run);
  k.move_to(device);
  // the test split is regenerated (or re-read) from the run's config
  train::ClassificationSet data = train::prepare_classification_set(k.config);
  const double accuracy = k.accuracy(data, data.test);
  char line[400];
  std::snprintf(line, sizeof line, "test accuracy %.4f (%zu examples), %s%s%s; weights %s",
                accuracy, data.test.size(), k.architecture().c_str(), options.int8 ? ", int8" : "",
                options.precision == "bf16" ? ", bf16 products" : "", weights.describe().c_str());
  return {accuracy, weights.file, line};
}

}  // namespace

EvalReport evaluate_run(const EvalOptions& options) {
  const Device device = checked_device(options.device, options.int8);
  QKV_CHECK(train::run_architecture(options.run) != "GPT", "--run", options.run,
            " is a language model: eval_command scores it in bits per character");
  QKV_CHECK(options.data.empty(), "--data", "only a language-model run is scored on a text; ",
            options.run, " is scored on its own test split");
  const Autocast precision(train::compute_dtype(options.precision));
  if (train::run_architecture(options.run) != "Seq2SeqTransformer")
    return evaluate_classifier(options, device);
  const train::ModelWeights weights = evaluated_weights(options);
  train::Translator t = train::load_translator(options.run, weights.file);
  if (options.int8) load_int8_model(*t.model, options.run);
  t.move_to(device);
  // the splits are regenerated from the run's config (same seed, same data)
  train::TranslationData data = train::prepare_translation_data(t.config);
  const ExactMatch m = translation_exact_match(t, data, options.beam);
  char line[400];
  std::snprintf(line, sizeof line,
                "test exact match %.4f (%zu of %zu), %s decoding%s%s; weights %s", m.fraction(),
                m.correct, m.total,
                options.beam > 1 ? ("beam " + std::to_string(options.beam)).c_str() : "greedy",
                options.int8 ? ", int8" : "", options.precision == "bf16" ? ", bf16 products" : "",
                weights.describe().c_str());
  return {m.fraction(), weights.file, line};
}

int eval_command(const EvalOptions& options) {
  checked_device(options.device, options.int8);  // a bad --device is named before a bad --run
  // a language model is scored in bits per character, not by a test split's score
  if (train::run_architecture(options.run) == "GPT") return language_model_eval(options);
  std::printf("%s\n", evaluate_run(options).line.c_str());
  return 0;
}

}  // namespace qkv::cli
