// The files of a language-model run folder besides the checkpoint, and loading such a run for
// `qkv sample`, `qkv eval` and `qkv attention`:
//   model.json      {"architecture": "GPT", "config": the GPTConfig} (train/trainer/translator.h's
//                   kModelJson), checked key by key when read, since a run folder may be edited
//   tokenizer.json  the char or BPE tokenizer (train/lm_tokenizer.h)
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "models/gpt.h"
#include "train/config.h"
#include "train/lm_tokenizer.h"
#include "train/trainer/best_model.h"

namespace qkv::train {

inline const char* kTokenizerJson = "tokenizer.json";

// The model a language-model config builds over a vocabulary of `vocab` tokens.
models::GPTConfig gpt_config(const Config& config, int64_t vocab);
// The tokenizer config.tokenizer names ("" is char), trained on `text`.
std::unique_ptr<LmTokenizer> train_lm_tokenizer(const Config& config, std::string_view text);

void save_gpt_model_json(const std::string& path, const models::GPTConfig& config);
// Throws qkv::Error("<source>: ...") naming the key for a wrong architecture, a missing or
// mistyped key, or a size out of range.
models::GPTConfig parse_gpt_model_json(std::string_view text, const std::string& source);

struct LanguageModelRun {
  Config config;  // the run's config.json
  models::GPTConfig model_config;
  std::unique_ptr<LmTokenizer> tokenizer;
  ModelWeights weights;                // which file the model's weights come from
  std::shared_ptr<models::GPT> model;  // those weights, in eval mode
};
// The run's best validation model (best.safetensors, the lowest validation loss), or its last
// checkpoint when `last` is set or it has no best model (train/trainer/best_model.h). Throws
// qkv::Error naming --run and the file for a folder that is not a language-model run or whose
// files do not agree (a tokenizer of another size than the model's vocabulary).
LanguageModelRun load_language_model(const std::string& run_dir, bool last);

}  // namespace qkv::train
