// From a Config to ready-to-batch examples: the one call the trainer makes to get its data.
//
// It picks the data source (a toy task, the order task, or the user's TSV file), makes disjoint
// train/valid/test splits, builds the vocabularies from the training split only, and encodes
// everything to token ids.
#pragma once

#include <string>
#include <vector>

#include "train/batching.h"
#include "train/config.h"
#include "train/tasks/task.h"
#include "train/tasks/task_table.h"
#include "train/tokenizer.h"

namespace qkv::train {

// The tokenizers a task reads and writes with unless the config names one (its task_table() row).
TokenizerChoice natural_tokenizers(const std::string& task);
// The tokenizers a run uses: config.tokenizer for both sides when set, else the task's own.
TokenizerChoice run_tokenizers(const Config& c);

// Translation: a toy task (copy, reverse, sort, dates, numbers) or "pairs" (config.data is a
// pairs.tsv). The vocabularies come from the training split.
struct TranslationData {
  TaskSplits pairs;
  Vocab source_vocab, target_vocab;
  std::vector<Example> train, valid, test;
  std::string tokenizer_line;  // why the pairs task chose its tokenizer ("" when none was chosen)
};
TranslationData prepare_translation_data(const Config& config);

// Text classification: "order" (synthetic, see data/order_task.h) or "classify" (config.data is
// a labels.tsv). Examples carry their label; `texts` keeps the raw text for reports.
struct ClassificationData {
  std::vector<std::string> labels;
  Vocab vocab;
  std::vector<Example> train, valid, test;
  std::vector<std::string> train_texts, valid_texts, test_texts;
};
ClassificationData prepare_classification_data(const Config& config);

// What kind of model a task needs (its task_table() row). Throws qkv::Error listing every valid
// task for an unknown one.
TaskKind task_kind(const std::string& task);

}  // namespace qkv::train
