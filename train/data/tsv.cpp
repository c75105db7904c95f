#include "train/data/tsv.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "engine/error.h"
#include "train/utf8.h"

namespace qkv::train {

namespace {

// Calls `use(line_number, first, second)` for every non-blank line; throws on a line without TAB.
// `path` names the source in errors.
void for_each_tsv_line(std::istream& in, const std::string& path, const char* first_name,
                       const char* second_name,
                       const std::function<void(size_t, std::string, std::string)>& use) {
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // Its text ends up in the vocabulary and run files, which are JSON: UTF-8 only.
    if (!is_valid_utf8(line))
      throw Error(path + ":" + std::to_string(number) + ": not valid UTF-8 text");
    size_t tab = line.find('\t');
    if (tab == std::string::npos)
      throw Error(path + ":" + std::to_string(number) + ": no TAB between " + first_name + " and " +
                  second_name + " (expected '" + first_name + "<TAB>" + second_name + "')");
    use(number, line.substr(0, tab), line.substr(tab + 1));
  }
  if (in.bad()) throw Error(path + ": read error: " + std::strerror(errno));
}

std::vector<Pair> pairs_from_stream(std::istream& in, const std::string& path) {
  std::vector<Pair> pairs;
  for_each_tsv_line(in, path, "source", "target",
                    [&](size_t number, std::string src, std::string tgt) {
                      if (src.empty() || tgt.empty())
                        throw Error(path + ":" + std::to_string(number) + ": empty " +
                                    (src.empty() ? "source" : "target"));
                      pairs.push_back({std::move(src), std::move(tgt)});
                    });
  if (pairs.empty()) throw Error(path + ": no pairs in the file");
  return pairs;
}

TextClassificationData classification_from_stream(std::istream& in, const std::string& path) {
  std::vector<std::pair<std::string, std::string>> rows;  // (label, text)
  for_each_tsv_line(in, path, "label", "text",
                    [&](size_t number, std::string label, std::string text) {
                      if (label.empty())
                        throw Error(path + ":" + std::to_string(number) + ": empty label");
                      rows.emplace_back(std::move(label), std::move(text));
                    });
  if (rows.empty()) throw Error(path + ": no examples in the file");
  TextClassificationData data;
  for (const auto& row : rows) data.labels.push_back(row.first);
  std::sort(data.labels.begin(), data.labels.end());
  data.labels.erase(std::unique(data.labels.begin(), data.labels.end()), data.labels.end());
  if (data.labels.size() < 2)
    throw Error(path + ": classification needs at least two labels, found only '" + data.labels[0] +
                "'");
  for (auto& [label, text] : rows) {
    auto at = std::lower_bound(data.labels.begin(), data.labels.end(), label);
    data.examples.push_back({std::move(text), int64_t(at - data.labels.begin())});
  }
  return data;
}

std::ifstream open_tsv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  return in;
}

}  // namespace

std::vector<Pair> read_pairs_tsv(const std::string& path) {
  std::ifstream in = open_tsv(path);
  return pairs_from_stream(in, path);
}

std::vector<Pair> parse_pairs_tsv(std::string_view text, const std::string& source) {
  std::istringstream in{std::string(text)};
  return pairs_from_stream(in, source);
}

TextClassificationData read_classification_tsv(const std::string& path) {
  std::ifstream in = open_tsv(path);
  return classification_from_stream(in, path);
}

TextClassificationData parse_classification_tsv(std::string_view text, const std::string& source) {
  std::istringstream in{std::string(text)};
  return classification_from_stream(in, source);
}

}  // namespace qkv::train
