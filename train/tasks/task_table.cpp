#include "train/tasks/task_table.h"

#include "engine/error.h"
#include "train/did_you_mean.h"

namespace qkv::train {

namespace {

constexpr TokenizerChoice kChars{TokenizerKind::character, TokenizerKind::character};
constexpr TokenizerChoice kWords{TokenizerKind::whitespace, TokenizerKind::whitespace};
constexpr TokenizerChoice kDigitsToWords{TokenizerKind::character, TokenizerKind::whitespace};

Pair date_pair(Rng& rng, const SymbolTaskOptions&) { return make_date_pair(rng); }
Pair number_pair(Rng& rng, const SymbolTaskOptions&) { return make_number_pair(rng); }

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

}  // namespace

const std::vector<TaskDefinition>& task_table() {
  using K = TaskKind;
  using D = TaskData;
  static const std::vector<TaskDefinition> table = {
      {"copy", K::translation, kChars, D::generated, make_copy_pair, "copy a string of symbols"},
      {"reverse", K::translation, kChars, D::generated, make_reverse_pair, "reverse it"},
      {"sort", K::translation, kChars, D::generated, make_sort_pair, "sort its symbols"},
      {"dates", K::translation, kChars, D::generated, date_pair, "a human date to ISO 8601"},
      {"numbers", K::translation, kDigitsToWords, D::generated, number_pair,
       "a number to English words"},
      {"pairs", K::translation, kWords, D::tsv_file, nullptr, "source<TAB>target lines (--data)"},
      {"order", K::text_classification, kWords, D::generated, nullptr,
       "is a sequence of words in order (data/order_task.h)"},
      {"classify", K::text_classification, kWords, D::tsv_file, nullptr,
       "label<TAB>text lines (--data)"},
      {"fashion-mnist", K::image_classification, kChars, D::idx_folder, nullptr,
       "28x28 clothing images (IDX files)"},
      {"lm", K::language_model, kChars, D::text_file, nullptr,
       "the next token of a UTF-8 text file (--data; qkv train lm)"},
  };
  return table;
}

std::vector<std::string> all_task_names() {
  std::vector<std::string> names;
  for (const auto& t : task_table()) names.push_back(t.name);
  return names;
}

std::vector<std::string> translation_task_names() {
  std::vector<std::string> names;
  for (const auto& t : task_table())
    if (t.kind == TaskKind::translation) names.push_back(t.name);
  return names;
}

std::vector<std::string> classification_task_names() {
  std::vector<std::string> names;
  for (const auto& t : task_table())
    if (t.kind == TaskKind::text_classification || t.kind == TaskKind::image_classification)
      names.push_back(t.name);
  return names;
}

std::vector<std::string> language_model_task_names() {
  std::vector<std::string> names;
  for (const auto& t : task_table())
    if (t.kind == TaskKind::language_model) names.push_back(t.name);
  return names;
}

const TaskDefinition& task_definition(const std::string& name) {
  for (const auto& t : task_table())
    if (t.name == name) return t;
  const auto names = all_task_names();
  std::string hint = did_you_mean(name, names);
  if (!hint.empty())
    hint = hint.substr(0, hint.size() - 1) + "; ";  // " (did you mean 'x'?; "
  else
    hint = " (";
  throw Error("--task: unknown task '" + name + "'" + hint + "valid: " + joined(names) + ")");
}

}  // namespace qkv::train
