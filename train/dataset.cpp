#include "train/dataset.h"

#include <algorithm>

#include "engine/error.h"
#include "train/data/order_task.h"
#include "train/data/split.h"
#include "train/data/tsv.h"
#include "train/scaled_defaults.h"

namespace qkv::train {

TaskKind task_kind(const std::string& task) { return task_definition(task).kind; }

TokenizerChoice natural_tokenizers(const std::string& task) {
  return task_definition(task).tokenizers;
}

TokenizerChoice run_tokenizers(const Config& c) {
  TokenizerChoice kinds = natural_tokenizers(c.task);
  if (!c.tokenizer.empty()) kinds.source = kinds.target = parse_tokenizer_kind(c.tokenizer);
  return kinds;
}

namespace {

void require_data_path(const Config& c) {
  if (c.data.empty())
    throw Error("--data: task '" + c.task + "' reads a TSV file; give its path with --data");
}

std::vector<std::string> sources_of(const std::vector<Pair>& pairs) {
  std::vector<std::string> out;
  for (const auto& p : pairs) out.push_back(p.source);
  return out;
}

std::vector<std::string> targets_of(const std::vector<Pair>& pairs) {
  std::vector<std::string> out;
  for (const auto& p : pairs) out.push_back(p.target);
  return out;
}

}  // namespace

TranslationData prepare_translation_data(const Config& c) {
  if (task_kind(c.task) == TaskKind::language_model)
    throw Error("--task: '" + c.task + "' is a language model: use `qkv train lm`");
  if (task_kind(c.task) != TaskKind::translation)
    throw Error("--task: '" + c.task + "' is a classification task, not a translation task");
  TranslationData d;
  if (task_definition(c.task).data == TaskData::tsv_file) {
    require_data_path(c);
    const std::vector<Pair> all = read_pairs_tsv(c.data);
    auto s = holdout_split(all, size_t(holdout_size(c.valid_size, all.size())),
                           size_t(holdout_size(c.test_size, all.size())), c.seed);
    d.pairs = {std::move(s.train), std::move(s.valid), std::move(s.test)};
  } else {
    SymbolTaskOptions options{.min_length = int(c.min_length), .max_length = int(c.max_length)};
    d.pairs =
        make_splits(c.task, size_t(c.train_size), size_t(generated_holdout_size(c.valid_size)),
                    size_t(generated_holdout_size(c.test_size)), c.seed, options);
  }
  TokenizerChoice kinds = run_tokenizers(c);
  if (c.task == "pairs" && c.tokenizer.empty()) {
    const PairsTokenizer chosen = choose_pairs_tokenizer(d.pairs.train);
    kinds = chosen.kinds;
    d.tokenizer_line = chosen.line;
  }
  d.source_vocab = Vocab::build(sources_of(d.pairs.train), kinds.source, int(c.min_frequency));
  d.target_vocab = Vocab::build(targets_of(d.pairs.train), kinds.target, int(c.min_frequency));
  d.train = encode_pairs(d.pairs.train, d.source_vocab, d.target_vocab);
  d.valid = encode_pairs(d.pairs.valid, d.source_vocab, d.target_vocab);
  d.test = encode_pairs(d.pairs.test, d.source_vocab, d.target_vocab);
  return d;
}

ClassificationData prepare_classification_data(const Config& c) {
  TaskKind kind = task_kind(c.task);
  if (kind == TaskKind::translation)
    throw Error("--task: '" + c.task + "' is a translation task, not a classification task");
  if (kind == TaskKind::language_model)
    throw Error("--task: '" + c.task + "' is a language model: use `qkv train lm`");
  if (kind == TaskKind::image_classification)
    throw Error("--task: '" + c.task + "' classifies images; load it with load_fashion_mnist");
  std::vector<TextExample> train, valid, test;
  ClassificationData d;
  if (task_definition(c.task).data == TaskData::generated) {
    OrderTaskOptions options{.min_length = int(std::max<int64_t>(c.min_length, 6)),
                             .max_length = int(std::max(c.max_length, c.min_length))};
    auto s = make_order_task(size_t(c.train_size), size_t(generated_holdout_size(c.valid_size)),
                             size_t(generated_holdout_size(c.test_size)), c.seed, options);
    d.labels = s.labels;
    train = std::move(s.train), valid = std::move(s.valid), test = std::move(s.test);
  } else {
    require_data_path(c);
    TextClassificationData all = read_classification_tsv(c.data);
    d.labels = all.labels;
    const size_t n = all.examples.size();
    auto s = holdout_split(all.examples, size_t(holdout_size(c.valid_size, n)),
                           size_t(holdout_size(c.test_size, n)), c.seed);
    train = std::move(s.train), valid = std::move(s.valid), test = std::move(s.test);
  }
  const TokenizerKind tokenizer = run_tokenizers(c).source;
  std::vector<std::string> train_texts;
  for (const auto& e : train) train_texts.push_back(e.text);
  d.vocab = Vocab::build(train_texts, tokenizer, int(c.min_frequency));
  auto encode = [&](const std::vector<TextExample>& in, std::vector<Example>& out,
                    std::vector<std::string>& texts) {
    for (const auto& e : in) {
      out.push_back({d.vocab.encode(e.text), {}, e.label});
      texts.push_back(e.text);
    }
  };
  encode(train, d.train, d.train_texts);
  encode(valid, d.valid, d.valid_texts);
  encode(test, d.test, d.test_texts);
  return d;
}

}  // namespace qkv::train
