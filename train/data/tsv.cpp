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

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

bool blank(const std::string& text) { return text.find_first_not_of(" \t") == std::string::npos; }

// Calls `use(line_number, first, second)` for every non-blank line; throws on a line without TAB.
// `path` names the source in errors.
void for_each_tsv_line(std::istream& in, const std::string& path, const char* first_name,
                       const char* second_name,
                       const std::function<void(size_t, std::string, std::string)>& use) {
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string at = path + ":" + std::to_string(number);
    // A byte-order mark (editors on Windows write one) is not text: it would become a token.
    if (number == 1 && line.rfind(kUtf8Bom, 0) == 0) line.erase(0, kUtf8Bom.size());
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find('\r') != std::string::npos)
      throw Error(at + ": a carriage return inside the line: the file's lines end in CR alone " +
                  "(old Mac style); convert them to LF, e.g. with tr '\\r' '\\n'");
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // Its text ends up in the vocabulary and run files, which are JSON: UTF-8 only.
    if (!is_valid_utf8(line)) throw Error(at + ": not valid UTF-8 text");
    size_t tab = line.find('\t');
    if (tab == std::string::npos)
      throw Error(at + ": no TAB between " + first_name + " and " + second_name + " (expected '" +
                  first_name + "<TAB>" + second_name + "')");
    if (line.find('\t', tab + 1) != std::string::npos)
      throw Error(at + ": more than two columns (a second TAB after the " + second_name +
                  "; expected '" + first_name + "<TAB>" + second_name + "')");
    use(number, line.substr(0, tab), line.substr(tab + 1));
  }
  if (in.bad()) throw Error(path + ": read error: " + std::strerror(errno));
}

std::vector<Pair> pairs_from_stream(std::istream& in, const std::string& path) {
  std::vector<Pair> pairs;
  for_each_tsv_line(in, path, "source", "target",
                    [&](size_t number, std::string src, std::string tgt) {
                      if (blank(src) || blank(tgt))
                        throw Error(path + ":" + std::to_string(number) + ": empty " +
                                    (blank(src) ? "source" : "target") +
                                    (src.empty() || tgt.empty() ? "" : " (only spaces)"));
                      pairs.push_back({std::move(src), std::move(tgt)});
                    });
  if (pairs.empty()) throw Error(path + ": no pairs in the file");
  return pairs;
}

TextClassificationData classification_from_stream(std::istream& in, const std::string& path) {
  std::vector<std::pair<std::string, std::string>> rows;  // (label, text)
  for_each_tsv_line(in, path, "label", "text",
                    [&](size_t number, std::string label, std::string text) {
                      if (blank(label))
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
