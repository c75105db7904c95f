#include "train/char_tokenizer.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/error.h"
#include "train/utf8_offset.h"

namespace qkv::train {

namespace {

constexpr int kFormatVersion = 1;
const char* const kReplacement = "\xEF\xBF\xBD";  // U+FFFD, what <unk> decodes to

size_t check_utf8(std::string_view text, const char* what) {
  size_t bad = first_invalid_utf8(text);
  if (bad != std::string_view::npos)
    throw Error(std::string(what) + ": invalid UTF-8 at byte " + std::to_string(bad));
  return bad;
}

std::string code_point_name(std::string_view c) {
  uint32_t cp = static_cast<unsigned char>(c[0]);
  if (c.size() > 1) {
    cp &= 0xFFu >> (c.size() + 1);
    for (size_t k = 1; k < c.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(c[k]) & 0x3F);
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", cp);
  return buf;
}

}  // namespace

void CharTokenizer::add(const std::string& character) {
  ids_.emplace(character, int64_t(characters_.size()) + 1);
  characters_.push_back(character);
}

CharTokenizer CharTokenizer::train(std::string_view text) {
  check_utf8(text, "char tokenizer");
  std::set<std::string> seen;  // byte order of UTF-8 is code point order
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8_sequence_length(text, i);
    seen.emplace(text.substr(i, n));
    i += n;
  }
  CharTokenizer t;
  for (const std::string& c : seen) t.add(c);
  return t;
}

std::vector<int64_t> CharTokenizer::encode(std::string_view text, bool allow_unknown) const {
  check_utf8(text, "char tokenizer");
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8_sequence_length(text, i);
    auto it = ids_.find(std::string(text.substr(i, n)));
    if (it == ids_.end() && !allow_unknown)
      throw Error("char tokenizer: character " + code_point_name(text.substr(i, n)) + " at byte " +
                  std::to_string(i) + " is not in the vocabulary of the training text");
    ids.push_back(it == ids_.end() ? UNK : it->second);
    i += n;
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    QKV_CHECK(id >= 0 && id < vocab_size(), "char tokenizer", "id ", id, " is outside 0..",
              vocab_size() - 1);
    out += id == UNK ? kReplacement : characters_[size_t(id - 1)];
  }
  return out;
}

std::string CharTokenizer::to_json() const {
  nlohmann::json j;
  j["format"] = "qkv-char";
  j["version"] = kFormatVersion;
  j["characters"] = characters_;
  return j.dump() + "\n";
}

CharTokenizer CharTokenizer::from_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": not JSON: " + e.what());
  }
  if (!j.is_object() || j.value("format", "") != "qkv-char")
    throw Error(source + ": key 'format' must be \"qkv-char\"");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != kFormatVersion)
    throw Error(source + ": key 'version' must be " + std::to_string(kFormatVersion));
  if (!j.contains("characters") || !j["characters"].is_array())
    throw Error(source + ": key 'characters' must be an array of strings");
  CharTokenizer t;
  for (size_t i = 0; i < j["characters"].size(); ++i) {
    const auto& c = j["characters"][i];
    const std::string where = source + ": key 'characters'[" + std::to_string(i) + "]";
    if (!c.is_string()) throw Error(where + " must be a string");
    std::string s = c.get<std::string>();
    if (s.empty() || utf8_sequence_length(s, 0) != s.size())
      throw Error(where + " must be exactly one character");
    if (t.ids_.count(s)) throw Error(where + " repeats " + code_point_name(s));
    t.add(s);
  }
  return t;
}

}  // namespace qkv::train
