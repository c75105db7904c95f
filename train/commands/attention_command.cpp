// `qkv attention --run DIR INPUT --out DIR`: what a trained model attends to, as PNG files.
//   translation runs: INPUT is a source text; every layer's and head's encoder self-, decoder
//                     self- and cross-attention, with the tokens along the axes.
//   text classifiers: INPUT is a text; its encoder self-attention, and the predicted label.
//   language models:  INPUT is a text; every block's and head's causal self-attention
//                     (language_model_commands.cpp).
//   image classifiers: INPUT is the index of a test image; CBAM's spatial attention over it, SE's
//                     channel weights (CNN), or every ViT head, and the predicted label.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/error.h"
#include "engine/ops.h"
#include "train/commands/commands.h"
#include "train/trainer/attention_pictures.h"
#include "train/trainer/best_model.h"
#include "train/trainer/classification_pictures.h"
#include "train/trainer/classifier.h"
#include "train/trainer/translator.h"

namespace qkv::cli {

namespace {

// "Sneaker (p = 0.93)": the most likely label of one example and its probability.
std::string predicted_label(const train::Classifier& k, const train::ClassificationSet& set,
                            const std::vector<train::Example>& examples, size_t index) {
  NoGrad no_grad;
  k.module().eval();
  Tensor logits = k.forward(train::make_classifier_batch(set, examples, {index}, k.config.max_len));
  k.module().train();
  std::vector<float> p = softmax(logits, -1).to(Device::cpu()).contiguous().to_vector<float>();
  const size_t best = size_t(std::max_element(p.begin(), p.end()) - p.begin());
  char text[32];
  std::snprintf(text, sizeof text, " (p = %.2f)", p[best]);
  return (best < set.labels.size() ? set.labels[best] : std::to_string(best)) + text;
}

int classifier_attention(const AttentionOptions& options) {
  train::Classifier k = train::load_classifier(
      options.run, train::choose_model_weights(options.run, options.last).file);
  train::ClassificationSet set = train::prepare_classification_set(k.config);
  std::vector<train::Example> examples;
  size_t index = 0;
  std::string caption;
  if (set.images) {
    // an image model's input is a test image, by its index
    const std::string& text = options.text;
    const bool digits =
        !text.empty() && text.size() <= 9 &&
        std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    QKV_CHECK(digits && std::stoul(text) < set.test.size(), "attention",
              "an image model takes the index of a test image, 0 to ", set.test.size() - 1,
              "; got '", text, "'");
    examples = set.test;
    index = std::stoul(text);
    caption = "test image " + text + " (" + set.labels[size_t(set.test[index].label)] + ")";
  } else {
    std::vector<int64_t> ids = k.vocab.encode(options.text);
    QKV_CHECK(!ids.empty(), "attention", "the text is empty");
    QKV_CHECK(int64_t(ids.size()) <= k.config.max_len, "attention", "the text has ", ids.size(),
              " tokens, more than the model's max_len of ", k.config.max_len);
    examples.push_back(train::Example{ids, {}, 0});
    caption = "\"" + options.text + "\"";
  }
  std::printf("prediction: %s\n", predicted_label(k, set, examples, index).c_str());
  auto paths = train::write_classifier_pictures(k, set, examples, index, caption, options.out);
  if (paths.empty())
    std::printf("(a %s without SE or CBAM has no attention to draw)\n", k.architecture().c_str());
  for (const auto& p : paths) std::printf("%s\n", p.c_str());
  return 0;
}

}  // namespace

int attention_command(const AttentionOptions& options) {
  if (train::run_architecture(options.run) == "GPT") return language_model_attention(options);
  if (train::run_architecture(options.run) != "Seq2SeqTransformer")
    return classifier_attention(options);
  train::Translator t = train::load_translator(
      options.run, train::choose_model_weights(options.run, options.last).file);
  t.check_inputs({options.text}, "attention");
  auto paths = train::write_attention_maps(t, options.text, options.out);
  for (const auto& p : paths) std::printf("%s\n", p.c_str());
  return 0;
}

}  // namespace qkv::cli
