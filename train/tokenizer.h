// Tokenization and vocabularies.
//
// Two tokenizers are enough for the toy tasks and small corpora: by character (dates, symbol
// tasks) and by whitespace (numbers, classification text). A Vocab maps tokens to ids; ids 0..3
// are reserved for the special tokens so that every model and the batching code can rely on them.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace qkv::train {

enum class TokenizerKind { character, whitespace };

// "char" / "whitespace"; parse throws qkv::Error naming `option` and the valid values.
std::string to_string(TokenizerKind kind);
TokenizerKind parse_tokenizer_kind(const std::string& name,
                                   const std::string& option = "--tokenizer");

// Splits `text` into tokens: each character (a UTF-8 code point; a byte that is not part of one
// stands alone), or each maximal run of non-space characters.
std::vector<std::string> tokenize(const std::string& text, TokenizerKind kind);

class Vocab {
 public:
  static constexpr int64_t PAD = 0, BOS = 1, EOS = 2, UNK = 3;

  explicit Vocab(TokenizerKind kind = TokenizerKind::character);

  // The vocabulary of `texts` (the training split: never valid or test, which would leak): the
  // special tokens, then every token seen at least `min_frequency` times, most frequent first
  // (ties in byte order, so the same data always gives the same ids).
  static Vocab build(const std::vector<std::string>& texts, TokenizerKind kind,
                     int min_frequency = 1);

  TokenizerKind kind() const { return kind_; }
  size_t size() const { return tokens_.size(); }
  const std::string& token(int64_t id) const;  // "<pad>", "<s>", "</s>", "<unk>", or the token
  int64_t id(const std::string& token) const;  // UNK when absent

  // Token ids of `text`, without BOS/EOS (batching adds those). Unknown tokens become UNK.
  std::vector<int64_t> encode(const std::string& text) const;
  // The text of `ids`: stops at the first EOS, skips PAD and BOS, writes UNK as "<unk>"; joins
  // character tokens directly and whitespace tokens with one space.
  std::string decode(const std::vector<int64_t>& ids) const;
  // One display string per id (specials included), for attention-map axes.
  std::vector<std::string> tokens_of(const std::vector<int64_t>& ids) const;

  // {"tokenizer": "char", "tokens": ["<pad>", "<s>", "</s>", "<unk>", ...]}, written atomically.
  std::string to_json() const;
  void save(const std::string& path) const;
  // Throws qkv::Error("<path>: <what is wrong>") for a missing, malformed or inconsistent file.
  static Vocab from_json(const std::string& text, const std::string& source = "vocab");
  static Vocab load(const std::string& path);

 private:
  void add(const std::string& token);
  TokenizerKind kind_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
};

}  // namespace qkv::train
