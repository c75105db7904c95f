// What `--resume` may change about a run, checked before the run folder is touched.
//
// A checkpoint belongs to the model shape, the data and the order of batches it was trained with:
// resuming with other heads loads the same tensors into a different architecture without any shape
// mismatch, and other data or another seed replays other batches. So a resumed run may change only
// the options config_fields() marks as may_change (steps, lr, eval_every, ...; checked by
// check_resume_changes in config.h), and config.json keeps a "resume_history" of every change and
// the step it took effect at.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "train/config.h"
#include "train/run_dir.h"
#include "train/tokenizer.h"

namespace qkv::train {

// The run's own config.json (run_dir/config.json). Throws qkv::Error naming --resume when the
// folder has none.
Config resumed_run_config(const std::string& run_dir);

// `requested` with its changes from `saved` appended to resume_history at `trained_steps`, the
// step the checkpoint reached. Throws qkv::Error when requested.steps is below trained_steps (the
// run would stop at once and config.json and trainer_state.json would disagree).
Config with_resume_history(Config requested, const Config& saved, int64_t trained_steps);

// Compares run_dir/model.json (when present) with the model config the run's options build; throws
// qkv::Error naming each key that differs (model.json edited by hand, or copied from another run).
void check_model_json_matches(const std::string& run_dir, const nlohmann::json& built);

// On --resume the vocabulary built from the data must be the run's `file` (token ids are rows of
// the checkpoint's embeddings); throws qkv::Error naming both sizes otherwise. A run folder without
// the file (an older layout) is not checked.
void check_resumed_vocab(const RunDir& run, const std::string& file, const Vocab& from_data);

}  // namespace qkv::train
