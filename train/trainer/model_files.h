// Reading what a run folder says about its model: model.json (architecture, config, labels) and
// trainer_state.json. These files come from outside the program (a run folder may be copied,
// edited or damaged), so every field is checked before a model is built from it: a negative width,
// a head count that does not divide the width or a billion-token vocabulary is an error naming the
// file and the key, not a crash or a many-gigabyte allocation inside a constructor.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/classifiers.h"
#include "models/seq2seq.h"
#include "nn/safetensors.h"
#include "train/tokenizer.h"

namespace qkv::train {

// Any model described by model.json must have at most this many parameters (8 GiB of float32):
// far beyond what qkv trains, so a larger count means a corrupt file, not a big model.
inline constexpr int64_t kMaxModelParameters = int64_t(1) << 31;

// The "architecture" field of a model.json ("Seq2SeqTransformer", "CnnClassifier", ...).
std::string parse_model_architecture(std::string_view text, const std::string& source);

// model.json of a translation run.
struct TranslatorModelJson {
  models::Seq2SeqConfig config;
  int64_t decode_max_len = 64;
};
TranslatorModelJson parse_translator_model_json(std::string_view text, const std::string& source);

// model.json of a classification run: exactly one config is set, as `architecture` says, and
// `labels` has one name per class.
struct ClassifierModelJson {
  std::string architecture;
  std::vector<std::string> labels;
  std::optional<models::TransformerClassifierConfig> text;
  std::optional<models::CnnClassifierConfig> cnn;
  std::optional<models::VisionTransformerConfig> vit;
};
ClassifierModelJson parse_classifier_model_json(std::string_view text, const std::string& source);

// About how many parameters a model built from a (validated) config has: an upper estimate that
// counts every embedding and positional table.
int64_t estimated_parameters(const models::Seq2SeqConfig& c);
int64_t estimated_parameters(const models::TransformerClassifierConfig& c);
int64_t estimated_parameters(const models::CnnClassifierConfig& c);
int64_t estimated_parameters(const models::VisionTransformerConfig& c);

// Loading a run reads its weights first and calls this before building the model: a model.json
// that describes a model far larger than the weights it sits beside (edited, or from another run)
// is refused there, instead of allocating that model and failing afterwards. Throws qkv::Error
// naming both files and both sizes.
void check_model_fits_weights(int64_t estimated, const nn::TensorMap& weights,
                              const std::string& model_json, const std::string& weights_file);

// The "config" object of the model.json at `path`, unchecked beyond being an object.
nlohmann::json read_model_json_config(const std::string& path);
// Each key in which a model.json's config differs from the one the run's config.json builds, as
// "num_heads 2 (config.json gives 4)", comma-separated; "" when they agree. The shape is what is
// compared: checkpoint_activations (how backward saves memory) is left out.
std::string model_config_differences(const nlohmann::json& in_file, const nlohmann::json& built);

// Throws qkv::Error("--run: <file>: tokenizer ...") when `vocab` was not made by `expected`, the
// tokenizer the run's config.json trains with.
void check_vocab_tokenizer(const Vocab& vocab, TokenizerKind expected, const std::string& file);

// The range checks parse_*_model_json apply; each throws qkv::Error("<source>: ...").
void validate_model_config(const models::Seq2SeqConfig& c, const std::string& source);
void validate_model_config(const models::TransformerClassifierConfig& c, const std::string& source);
void validate_model_config(const models::CnnClassifierConfig& c, const std::string& source);
void validate_model_config(const models::VisionTransformerConfig& c, const std::string& source);

}  // namespace qkv::train
