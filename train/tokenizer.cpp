#include "train/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "nn/unique_keys_json.h"
#include "train/atomic_file.h"
#include "train/utf8.h"

namespace qkv::train {

namespace {

const std::vector<std::string> kSpecials = {"<pad>", "<s>", "</s>", "<unk>"};

// A token the vocabulary's tokenizer can produce: one character for "char", a run of non-space
// characters for "whitespace". Anything else could never be looked up, and means the file was
// edited (its "tokenizer" switched, or a token changed).
void check_token_fits(const std::string& token, TokenizerKind kind, size_t index,
                      const std::string& source) {
  const std::string at = source + ": token " + std::to_string(index) + " '" + token + "'";
  if (token.empty()) throw Error(source + ": token " + std::to_string(index) + " is empty");
  if (kind == TokenizerKind::character && split_utf8(token).size() != 1)
    throw Error(at + " is not one character, as every token of a \"char\" vocabulary is (was " +
                "\"tokenizer\" changed?)");
  if (kind == TokenizerKind::whitespace && tokenize(token, kind) != std::vector<std::string>{token})
    throw Error(at + " holds whitespace, which a \"whitespace\" vocabulary's tokens never do " +
                "(was \"tokenizer\" changed?)");
}

}  // namespace

std::string to_string(TokenizerKind kind) {
  return kind == TokenizerKind::character ? "char" : "whitespace";
}

TokenizerKind parse_tokenizer_kind(const std::string& name, const std::string& option) {
  if (name == "char") return TokenizerKind::character;
  if (name == "whitespace") return TokenizerKind::whitespace;
  throw Error(option + ": unknown tokenizer '" + name + "' (valid: char, whitespace)");
}

std::vector<std::string> tokenize(const std::string& text, TokenizerKind kind) {
  std::vector<std::string> tokens;
  if (kind == TokenizerKind::character) {
    return split_utf8(text);  // characters, not bytes: "é" is one token
  }
  std::string current;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!current.empty()) tokens.push_back(std::move(current));
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) tokens.push_back(std::move(current));
  return tokens;
}

Vocab::Vocab(TokenizerKind kind) : kind_(kind) {
  for (const auto& s : kSpecials) add(s);
}

void Vocab::add(const std::string& token) {
  ids_.emplace(token, int64_t(tokens_.size()));
  tokens_.push_back(token);
}

Vocab Vocab::build(const std::vector<std::string>& texts, TokenizerKind kind, int min_frequency) {
  std::map<std::string, int64_t> counts;  // ordered: ties come out in byte order
  for (const auto& text : texts)
    for (auto& token : tokenize(text, kind)) ++counts[token];
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  Vocab vocab(kind);
  for (const auto& [token, count] : sorted)
    if (count >= min_frequency && !vocab.ids_.count(token)) vocab.add(token);
  return vocab;
}

const std::string& Vocab::token(int64_t id) const {
  QKV_CHECK(id >= 0 && id < int64_t(tokens_.size()), "Vocab::token", "id ", id,
            " out of range for a vocabulary of ", tokens_.size());
  return tokens_[size_t(id)];
}

int64_t Vocab::id(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? UNK : it->second;
}

std::vector<int64_t> Vocab::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  for (const auto& token : tokenize(text, kind_)) ids.push_back(id(token));
  return ids;
}

std::string Vocab::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  bool first = true;
  for (int64_t id : ids) {
    if (id == EOS) break;
    if (id == PAD || id == BOS) continue;
    if (kind_ == TokenizerKind::whitespace && !first) text += ' ';
    text += token(id);
    first = false;
  }
  return text;
}

std::vector<std::string> Vocab::tokens_of(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  for (int64_t id : ids) out.push_back(token(id));
  return out;
}

std::string Vocab::to_json() const {
  nlohmann::json j;
  j["tokenizer"] = to_string(kind_);
  j["tokens"] = tokens_;
  return j.dump(1) + "\n";
}

void Vocab::save(const std::string& path) const { write_file_atomic(path, to_json()); }

Vocab Vocab::from_json(const std::string& text, const std::string& source) {
  nlohmann::json j = nn::parse_json_text(text, source);
  if (!j.is_object() || !j.contains("tokenizer") || !j.contains("tokens"))
    throw Error(source + ": a vocabulary needs the keys \"tokenizer\" and \"tokens\"");
  if (!j["tokenizer"].is_string()) throw Error(source + ": \"tokenizer\" must be a string");
  if (!j["tokens"].is_array()) throw Error(source + ": \"tokens\" must be an array of strings");
  Vocab vocab(parse_tokenizer_kind(j["tokenizer"].get<std::string>(), source + ": \"tokenizer\""));
  const auto& tokens = j["tokens"];
  if (tokens.size() < kSpecials.size())
    throw Error(source + ": \"tokens\" must start with <pad>, <s>, </s>, <unk>");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!tokens[i].is_string())
      throw Error(source + ": token " + std::to_string(i) + " is not a string");
    std::string token = tokens[i].get<std::string>();
    if (i < kSpecials.size()) {
      if (token != kSpecials[i])
        throw Error(source + ": token " + std::to_string(i) + " must be " + kSpecials[i] +
                    ", found '" + token + "'");
      continue;
    }
    check_token_fits(token, vocab.kind_, i, source);
    if (vocab.ids_.count(token))
      throw Error(source + ": token '" + token + "' appears twice (ids " +
                  std::to_string(vocab.ids_[token]) + " and " + std::to_string(i) + ")");
    vocab.add(token);
  }
  return vocab;
}

Vocab Vocab::load(const std::string& path) { return from_json(read_file(path, "vocab"), path); }

}  // namespace qkv::train
