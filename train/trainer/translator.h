// A translation model as a run folder holds it: the config, the two vocabularies, the model's
// architecture (model.json, so the model is rebuilt without flags) and its weights.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/seq2seq.h"
#include "train/checkpoint_dir.h"
#include "train/config.h"
#include "train/tokenizer.h"

namespace qkv::train {

struct Translator {
  Config config;
  Vocab source_vocab, target_vocab;
  models::Seq2SeqConfig model_config;
  int64_t decode_max_len = 64;  // generated tokens at most (from the training targets)
  std::shared_ptr<models::Seq2SeqTransformer> model;
  Device device = Device::cpu();

  // Throws qkv::Error("<op>: text 2 is empty ...") for an empty text, or one longer than the
  // config's max_len tokens: translate() would cut it to max_len as training batches are, which
  // evaluation wants but a person typing a sentence would not expect.
  void check_inputs(const std::vector<std::string>& texts, const char* op) const;

  // Moves the model's parameters and buffers to `to`; translate() then runs there.
  void move_to(Device to);

  // Greedy (beam = 1) or beam-search translations of `texts`, decoded to strings; `ids` (if given)
  // receives each output's token ids, BOS first. Texts longer than max_len tokens are truncated.
  std::vector<std::string> translate(const std::vector<std::string>& texts, int64_t beam = 1,
                                     std::vector<std::vector<int64_t>>* ids = nullptr) const;
};

Device parse_device(const std::string& name);  // "cpu", "cuda", "cuda:1"
models::Seq2SeqConfig seq2seq_config(const Config& config, int64_t src_vocab, int64_t tgt_vocab);

// Files of a run folder, by name.
inline const char* kModelJson = "model.json";
inline const char* kSourceVocab = "source_vocab.json";
inline const char* kTargetVocab = "target_vocab.json";

void save_model_json(const std::string& path, const models::Seq2SeqConfig& config,
                     int64_t decode_max_len);
// Rebuilds the model from a run folder and loads its weights from `weights_file` there
// (model.safetensors, the last checkpoint, or best.safetensors: train/trainer/best_model.h).
// Errors name the folder and the file.
Translator load_translator(const std::string& run_dir,
                           const std::string& weights_file = kModelFile);

}  // namespace qkv::train
