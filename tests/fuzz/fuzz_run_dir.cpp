// What `qkv translate/eval/attention --run` and `--resume` read from a run folder besides the
// config, vocabularies and checkpoints (they have their own targets): model.json of a translation
// or a classification run, trainer_state.json and metrics.jsonl. Every input goes to each reader.
//
// A model.json that passes validation must build its model without any error: the validation is
// what stands between the file and the constructors. Building is done for small configs only, to
// keep the fuzzer fast; the size bounds themselves are checked by the validation on every input.
#include "tests/fuzz/fuzz_support.h"
#include "train/run_dir.h"
#include "train/trainer/checkpoint.h"
#include "train/trainer/model_files.h"

using namespace qkv;

namespace {

bool small(int64_t d_model, int64_t ff, int64_t layers) {
  return d_model <= 16 && ff <= 32 && layers <= 2;
}

void build_small_translator(const models::Seq2SeqConfig& c) {
  if (small(c.d_model, c.dim_feedforward, std::max(c.num_encoder_layers, c.num_decoder_layers)) &&
      c.src_vocab <= 64 && c.tgt_vocab <= 64 && c.max_len <= 64)
    models::Seq2SeqTransformer model(c);
}

void build_small_classifier(const train::ClassifierModelJson& m) {
  if (m.text && small(m.text->d_model, m.text->dim_feedforward, m.text->num_layers) &&
      m.text->vocab <= 64 && m.text->max_len <= 64 && m.text->num_classes <= 64)
    models::TransformerClassifier model(*m.text);
  if (m.cnn && m.cnn->channels.size() <= 3 && m.cnn->num_classes <= 64 && m.cnn->in_channels <= 4) {
    bool narrow = true;
    for (int64_t width : m.cnn->channels) narrow = narrow && width <= 16;
    if (narrow) models::CnnClassifier model(*m.cnn);
  }
  if (m.vit && small(m.vit->d_model, m.vit->dim_feedforward, m.vit->num_layers) &&
      m.vit->image_size <= 32 && m.vit->in_channels <= 4 && m.vit->num_classes <= 64)
    models::VisionTransformer model(*m.vit);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  train::TranslatorModelJson translator;
  if (fuzz::accepts("model.json",
                    [&] { translator = train::parse_translator_model_json(text, "model.json"); }))
    build_small_translator(translator.config);

  train::ClassifierModelJson classifier;
  if (fuzz::accepts("model.json",
                    [&] { classifier = train::parse_classifier_model_json(text, "model.json"); })) {
    FUZZ_CHECK(int(bool(classifier.text)) + bool(classifier.cnn) + bool(classifier.vit) == 1);
    build_small_classifier(classifier);
  }

  fuzz::accepts("model.json", [&] { train::parse_model_architecture(text, "model.json"); });

  train::TrainerState state;
  if (fuzz::accepts("trainer_state.json",
                    [&] { state = train::parse_trainer_state(text, "trainer_state.json"); }))
    FUZZ_CHECK(state.step >= 0);

  std::vector<train::Series> series;
  if (fuzz::accepts("metrics.jsonl", [&] {
        series = train::parse_metric_series(text, "metrics.jsonl", {"loss", "valid_loss"});
      })) {
    FUZZ_CHECK(series.size() == 2);
    for (const auto& s : series) FUZZ_CHECK(s.x.size() == s.y.size());
  }
  return 0;
}
