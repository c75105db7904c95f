// A user's own data as tab-separated text.
//
//   pairs.tsv (translation):    source TAB target        one pair per line
//   labels.tsv (classification): label TAB text          one example per line
//
// Blank lines are skipped, a trailing '\r' (a file saved on Windows) is dropped, and so is a UTF-8
// byte-order mark at the start of the file. A line without a TAB or with a second one, an empty or
// all-space source, target or label, and a file whose lines end in CR alone are errors naming the
// file and the line number, since silently reading them otherwise would train on other data than
// the user thinks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "train/tasks/task.h"

namespace qkv::train {

std::vector<Pair> read_pairs_tsv(const std::string& path);
// The same on the file's text; `source` (the file name) starts every error.
std::vector<Pair> parse_pairs_tsv(std::string_view text, const std::string& source);

struct TextExample {
  std::string text;
  int64_t label = 0;  // index into TextClassificationData::labels
};

struct TextClassificationData {
  std::vector<std::string> labels;  // label names, sorted, so ids do not depend on line order
  std::vector<TextExample> examples;
};

TextClassificationData read_classification_tsv(const std::string& path);
TextClassificationData parse_classification_tsv(std::string_view text, const std::string& source);

}  // namespace qkv::train
