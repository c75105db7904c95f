// The defaults that depend on the data: how long a run trains, how much of a user's corpus it
// holds out, and which tokenizer reads a pairs corpus. Each applies only where the options leave
// the choice open (steps and epochs 0, valid_size and test_size 0, tokenizer ""), and each says
// what it chose in one line, so a run's log shows why it trained the way it did.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/tasks/task.h"
#include "train/tasks/task_table.h"

namespace qkv::train {

// ---- run length
// One epoch is one pass over the training split at the global batch size.
int64_t steps_per_epoch(size_t train_examples, int64_t batch_size);

// With neither --steps nor --epochs, a run trains kDefaultEpochs epochs, clamped to
// [kMinDefaultSteps, kMaxDefaultSteps] steps: a small corpus still gets enough updates to fit it,
// a large one does not run for hours on a CPU. docs/TRAINING.md has the measurements behind them.
constexpr int64_t kDefaultEpochs = 20;
constexpr int64_t kMinDefaultSteps = 5000;
constexpr int64_t kMaxDefaultSteps = 10000;

struct RunLength {
  int64_t steps = 0;
  std::string line;  // "steps: 5640 (20 epochs of 18000 pairs at batch 64)"
};
// The steps a run trains: config.steps when set, else config.epochs epochs, else the rule above.
// `items` names the examples in the line ("pairs", "examples", "images").
RunLength choose_run_length(const Config& config, size_t train_examples, const std::string& items);
// `config` with its steps set from choose_run_length and epochs cleared: what config.json records,
// so a resumed run goes on with the same number of steps (and --steps extends it).
Config with_run_length(const Config& config, const RunLength& length);

// ---- held-out splits of a user's corpus
// With --valid-size / --test-size 0 (the default), a corpus of n examples holds out 10% of it for
// each, at least 1 and at most kMaxHoldout: a 3000-line file keeps 2400 lines for training, a
// 100,000-line one 98,000. A generated task holds out kMaxHoldout.
constexpr int64_t kMaxHoldout = 1000;
int64_t holdout_size(int64_t requested, size_t corpus_examples);
// The same for a task whose examples are generated (there is no corpus to take a share of).
int64_t generated_holdout_size(int64_t requested);

// ---- the pairs task's tokenizer
// When most training targets are one word (a number, an inflected form, a label-like answer), a
// word vocabulary would make every unseen target <unk>: both sides are read by characters.
// Otherwise words, as before. `line` says which and why.
struct PairsTokenizer {
  TokenizerChoice kinds;
  std::string line;
};
PairsTokenizer choose_pairs_tokenizer(const std::vector<Pair>& train);

}  // namespace qkv::train
