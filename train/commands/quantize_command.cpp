// `qkv quantize --run DIR`: INT8 post-training quantization of a trained run's Linear layers
// (nn/quantized.h), measured before and after on the run's own test split: accuracy, the time of
// the whole test set (batches of 256, as `qkv eval`) and the latency of one example at a time.
// Writes DIR/model.int8.safetensors, which `qkv eval --run DIR --int8` loads.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "engine/error.h"
#include "nn/quantized.h"
#include "nn/safetensors.h"
#include "train/commands/commands.h"
#include "train/commands/run_scoring.h"
#include "train/run_lock.h"
#include "train/trainer/best_model.h"
#include "train/trainer/classifier.h"
#include "train/trainer/translator.h"

namespace qkv::cli {

namespace {

struct Measurement {
  double accuracy = 0;      // exact match (translation) or accuracy (classification)
  double test_seconds = 0;  // the whole test split, batched
  double latency_ms = 0;    // mean over single examples
};

double seconds_of(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Measures what `score` (test-set accuracy) and `one` (inference on example i alone) give now.
Measurement measure(const std::function<double()>& score, const std::function<void(size_t)>& one,
                    size_t latency_examples) {
  Measurement m;
  m.test_seconds = seconds_of([&] { m.accuracy = score(); });
  one(0);  // warm the allocator and the thread pool before timing single examples
  m.latency_ms = 1e3 * seconds_of([&] {
                   for (size_t i = 0; i < latency_examples; ++i) one(i);
                 }) /
                 double(latency_examples);
  return m;
}

double file_megabytes(const std::string& path) {
  std::error_code ec;
  auto bytes = std::filesystem::file_size(path, ec);
  return ec ? 0.0 : double(bytes) / 1e6;
}

void report(const char* metric, const Measurement& fp32, const Measurement& int8) {
  std::printf("%-8s %18s %14s %16s\n", "", metric, "test set", "one example");
  std::printf("%-8s %18.4f %12.2f s %13.3f ms\n", "float32", fp32.accuracy, fp32.test_seconds,
              fp32.latency_ms);
  std::printf("%-8s %18.4f %12.2f s %13.3f ms\n", "int8", int8.accuracy, int8.test_seconds,
              int8.latency_ms);
  std::printf("%-8s %+15.2f pt %11.2fx %15.2fx   (speed: float32 time / int8 time)\n", "change",
              100 * (int8.accuracy - fp32.accuracy), fp32.test_seconds / int8.test_seconds,
              fp32.latency_ms / int8.latency_ms);
}

}  // namespace

int quantize_command(const QuantizeOptions& options) {
  const std::string& run = options.run;
  const std::string out = run + "/" + kInt8ModelFile;
  train::run_architecture(run);  // a run folder, before a lock file is made in it
  const train::RunFolderLock one_writer(run, "--run");
  nn::Module* module = nullptr;
  std::function<double()> score;
  std::function<void(size_t)> one;
  size_t test_size = 0;
  const char* metric = "";

  // Both kinds of run are loaded and their test split rebuilt exactly as `qkv eval` does.
  std::unique_ptr<train::Translator> translator;
  std::unique_ptr<train::Classifier> classifier;
  std::unique_ptr<train::TranslationData> text_data;
  std::unique_ptr<train::ClassificationSet> class_data;
  const train::ModelWeights weights = train::choose_model_weights(run, options.last);
  if (train::run_architecture(run) == "Seq2SeqTransformer") {
    translator = std::make_unique<train::Translator>(train::load_translator(run, weights.file));
    text_data = std::make_unique<train::TranslationData>(
        train::prepare_translation_data(translator->config));
    module = translator->model.get();
    metric = "test exact match";
    test_size = text_data->pairs.test.size();
    score = [&] { return translation_exact_match(*translator, *text_data, 1).fraction(); };
    one = [&](size_t i) { translator->translate({text_data->pairs.test[i % test_size].source}); };
  } else {
    classifier = std::make_unique<train::Classifier>(train::load_classifier(run, weights.file));
    class_data = std::make_unique<train::ClassificationSet>(
        train::prepare_classification_set(classifier->config));
    module = &classifier->module();
    metric = "test accuracy";
    test_size = class_data->test.size();
    score = [&] { return classifier->accuracy(*class_data, class_data->test); };
    one = [&](size_t i) {
      NoGrad no_grad;
      classifier->module().eval();
      classifier->forward(train::make_classifier_batch(
          *class_data, class_data->test, {i % test_size}, classifier->config.max_len));
      classifier->module().train();
    };
  }
  QKV_CHECK(test_size > 0, "quantize", "the run's test split is empty: nothing to measure");
  const size_t latency_examples = std::min<size_t>(options.latency_examples, test_size);

  const Measurement fp32 = measure(score, one, latency_examples);
  const int64_t layers = nn::quantize_linear_layers(*module);
  QKV_CHECK(layers > 0, "quantize", "the model in ", run, " has no Linear layers to quantize");
  const Measurement int8 = measure(score, one, latency_examples);

  nn::save_safetensors(
      out, nn::quantized_state_dict(*module),
      {{"format", "qkv-int8"},
       {"quantized_linear_layers", std::to_string(layers)},
       {"weights", weights.file}});  // the float weights it replaces (qkv eval --int8 checks)
  std::printf("quantized %lld Linear layers (per-channel int8 weights, per-row int8 activations)\n",
              (long long)layers);
  std::printf("%s: %.2f MB (float32 %s: %.2f MB)\n", out.c_str(), file_megabytes(out),
              weights.describe().c_str(), file_megabytes(run + "/" + weights.file));
  std::printf("%zu test examples; one-example latency over the first %zu, %s\n", test_size,
              latency_examples, train::run_architecture(run).c_str());
  report(metric, fp32, int8);
  return 0;
}

}  // namespace qkv::cli
