#include "train/bpe_tokenizer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/error.h"

namespace qkv::train {

namespace {

enum class ByteClass { word, space, punct, other_space };

ByteClass classify(unsigned char b) {
  if (b == ' ') return ByteClass::space;
  if (b == '\n' || b == '\t' || b == '\r' || b == '\v' || b == '\f') return ByteClass::other_space;
  if ((b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b >= 0x80)
    return ByteClass::word;
  return ByteClass::punct;
}

uint64_t key(int64_t a, int64_t b) { return (uint64_t(a) << 32) | uint64_t(b); }

// Replaces every non-overlapping (a, b), left to right, with `merged`.
void apply_merge(std::vector<int64_t>& ids, int64_t a, int64_t b, int64_t merged) {
  size_t out = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b)
      ids[out++] = merged, ++i;
    else
      ids[out++] = ids[i];
  }
  ids.resize(out);
}

}  // namespace

std::vector<std::string_view> bpe_chunks(std::string_view s) {
  auto cls = [&](size_t k) { return classify(static_cast<unsigned char>(s[k])); };
  // A space directly before a word or punctuation belongs to that chunk.
  auto leads = [&](size_t k) {
    return s[k] == ' ' && k + 1 < s.size() &&
           (cls(k + 1) == ByteClass::word || cls(k + 1) == ByteClass::punct);
  };
  std::vector<std::string_view> chunks;
  for (size_t i = 0; i < s.size();) {
    size_t j = leads(i) ? i + 1 : i, k = j + 1;
    const ByteClass c = cls(j);
    if (c == ByteClass::space)
      while (k < s.size() && s[k] == ' ' && !leads(k)) ++k;
    else
      while (k < s.size() && cls(k) == c) ++k;
    chunks.push_back(s.substr(i, k - i));
    i = k;
  }
  return chunks;
}

BpeTokenizer::BpeTokenizer() {
  for (int b = 0; b < 256; ++b) pieces_.push_back(std::string(1, char(b)));
}

void BpeTokenizer::add_merge(int64_t a, int64_t b) {
  rank_.emplace(key(a, b), int64_t(merges_.size()));
  merges_.emplace_back(a, b);
  pieces_.push_back(pieces_[size_t(a)] + pieces_[size_t(b)]);
}

BpeTokenizer BpeTokenizer::train(std::string_view text, int64_t vocab_size) {
  QKV_CHECK(vocab_size >= 256, "--vocab-size", "byte-level BPE needs at least the 256 bytes, got ",
            vocab_size);
  // Distinct chunks with their counts, in byte order (so the work below is deterministic).
  std::map<std::string_view, int64_t> counts;
  for (std::string_view chunk : bpe_chunks(text)) ++counts[chunk];
  std::vector<std::vector<int64_t>> words;
  std::vector<int64_t> freq;
  for (const auto& [chunk, n] : counts) {
    if (chunk.size() < 2) continue;  // nothing to merge, ever
    words.emplace_back(chunk.begin(), chunk.end());
    for (int64_t& id : words.back()) id = static_cast<unsigned char>(id);
    freq.push_back(n);
  }
  BpeTokenizer t;
  std::unordered_map<uint64_t, int64_t> pairs;
  while (t.vocab_size() < vocab_size) {
    pairs.clear();
    for (size_t w = 0; w < words.size(); ++w)
      for (size_t i = 0; i + 1 < words[w].size(); ++i)
        pairs[key(words[w][i], words[w][i + 1])] += freq[w];
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [k, n] : pairs)
      if (n > best_count || (n == best_count && k < best)) best = k, best_count = n;
    if (best_count < 2) break;
    const int64_t a = int64_t(best >> 32), b = int64_t(best & 0xFFFFFFFFu);
    const int64_t merged = t.vocab_size();
    t.add_merge(a, b);
    for (auto& word : words) apply_merge(word, a, b, merged);
  }
  return t;
}

std::vector<int64_t> BpeTokenizer::encode_chunk(std::string_view chunk) const {
  std::vector<int64_t> ids(chunk.begin(), chunk.end());
  for (int64_t& id : ids) id = static_cast<unsigned char>(id);
  while (ids.size() > 1) {
    int64_t best = -1;  // the earliest-learned merge present
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      auto it = rank_.find(key(ids[i], ids[i + 1]));
      if (it != rank_.end() && (best < 0 || it->second < best)) best = it->second;
    }
    if (best < 0) break;
    apply_merge(ids, merges_[size_t(best)].first, merges_[size_t(best)].second, 256 + best);
  }
  return ids;
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text, bool) const {
  std::unordered_map<std::string_view, std::vector<int64_t>> memo;  // chunks repeat a lot
  std::vector<int64_t> ids;
  for (std::string_view chunk : bpe_chunks(text)) {
    auto it = memo.find(chunk);
    if (it == memo.end()) it = memo.emplace(chunk, encode_chunk(chunk)).first;
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  }
  return ids;
}

const std::string& BpeTokenizer::piece(int64_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size(), "bpe tokenizer", "id ", id, " is outside 0..",
            vocab_size() - 1);
  return pieces_[size_t(id)];
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) out += piece(id);
  return out;
}

int64_t BpeTokenizer::units(int64_t id) const { return int64_t(piece(id).size()); }

std::string BpeTokenizer::to_json() const {
  nlohmann::json j;
  j["format"] = "qkv-bpe";
  j["version"] = kFormatVersion;
  j["vocab_size"] = vocab_size();
  j["merges"] = nlohmann::json::array();
  for (const auto& [a, b] : merges_) j["merges"].push_back({a, b});
  return j.dump() + "\n";
}

BpeTokenizer BpeTokenizer::from_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": not JSON: " + e.what());
  }
  if (!j.is_object() || j.value("format", "") != "qkv-bpe")
    throw Error(source + ": key 'format' must be \"qkv-bpe\"");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != kFormatVersion)
    throw Error(source + ": key 'version' must be " + std::to_string(kFormatVersion));
  if (!j.contains("merges") || !j["merges"].is_array())
    throw Error(source + ": key 'merges' must be an array of [id, id] pairs");
  BpeTokenizer t;
  for (size_t i = 0; i < j["merges"].size(); ++i) {
    const auto& m = j["merges"][i];
    const bool ok = m.is_array() && m.size() == 2 && m[0].is_number_integer() &&
                    m[1].is_number_integer() && m[0].get<int64_t>() >= 0 &&
                    m[1].get<int64_t>() >= 0 && m[0].get<int64_t>() < t.vocab_size() &&
                    m[1].get<int64_t>() < t.vocab_size();
    if (!ok)
      throw Error(source + ": key 'merges'[" + std::to_string(i) + "] must be two ids below " +
                  std::to_string(t.vocab_size()));
    if (t.rank_.count(key(m[0].get<int64_t>(), m[1].get<int64_t>())))
      throw Error(source + ": key 'merges'[" + std::to_string(i) + "] repeats an earlier merge");
    t.add_merge(m[0].get<int64_t>(), m[1].get<int64_t>());
  }
  if (!j.contains("vocab_size") || !j["vocab_size"].is_number_integer() ||
      j["vocab_size"].get<int64_t>() != t.vocab_size())
    throw Error(source + ": key 'vocab_size' must be 256 + the number of merges (" +
                std::to_string(t.vocab_size()) + ")");
  return t;
}

}  // namespace qkv::train
