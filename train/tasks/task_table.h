// Every task `qkv train` knows, in one table: its name, the kind of model it trains, the tokenizers
// it reads and writes with, and where its examples come from. The config's `task` choices, the
// --task choices of each `qkv train` subcommand, the data preparation and the tokenizers all read
// this table; a task is added by adding its row (docs/TRAINING.md, "Adding a task").
#pragma once

#include <string>
#include <vector>

#include "train/tasks/task.h"
#include "train/tokenizer.h"

namespace qkv::train {

// What kind of model a task needs, and so which `qkv train` subcommand trains it.
enum class TaskKind { translation, text_classification, image_classification, language_model };

// The tokenizers a task reads and writes with unless the config names one: characters for
// strings of symbols and dates, words for English ("numbers" reads digits, writes words).
struct TokenizerChoice {
  TokenizerKind source, target;
};

// Where a task's examples come from.
enum class TaskData {
  generated,   // made from the seed (a PairGenerator, or the task's own generator)
  tsv_file,    // read from the TSV file named by --data
  idx_folder,  // read from IDX files (fashion-mnist)
  text_file    // one UTF-8 text file named by --data (the language model)
};

// One pair of a translation toy task; null for tasks that do not generate translation pairs.
using PairGenerator = Pair (*)(Rng&, const SymbolTaskOptions&);

// A task's row: a *task* is the name --task gives (Config::task), its kind the model it needs, its
// definition everything the table knows of it.
struct TaskDefinition {
  std::string name;
  TaskKind kind;
  TokenizerChoice tokenizers;
  TaskData data;
  PairGenerator generate;  // translation tasks made from the seed only
  std::string help;
};

// The table, in the order --help lists it.
const std::vector<TaskDefinition>& task_table();

// The definition of task `name`. Throws qkv::Error for an unknown name: "--task: unknown task
// 'revrse' (did you mean 'reverse'?; valid: copy, reverse, ...)".
const TaskDefinition& task_definition(const std::string& name);

// The names of every task, and of the tasks one `qkv train` subcommand trains: translation, or
// classification (text and images), or language modelling.
std::vector<std::string> all_task_names();
std::vector<std::string> translation_task_names();
std::vector<std::string> classification_task_names();
std::vector<std::string> language_model_task_names();

}  // namespace qkv::train
