// Tokenizers of the language model: text <-> token ids, and how many characters or bytes a token
// stands for (bits per character / per byte divide by those, not by tokens).
//
// Two kinds, each saved as tokenizer.json in the run folder with a "format" and a "version":
// - char (train/char_tokenizer.h): one id per code point seen in the training split;
// - bpe (train/bpe_tokenizer.h): byte-level BPE, merges learned on the training split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::train {

class LmTokenizer {
 public:
  virtual ~LmTokenizer() = default;
  virtual std::string kind() const = 0;  // "char" | "bpe"
  virtual int64_t vocab_size() const = 0;
  // Token ids of `text`. A text the tokenizer cannot represent exactly throws qkv::Error naming
  // the byte offset, unless allow_unknown (the char tokenizer then maps it to its <unk> id).
  virtual std::vector<int64_t> encode(std::string_view text, bool allow_unknown = false) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  // The number of units (code points for char, bytes for bpe) token `id` stands for.
  virtual int64_t units(int64_t id) const = 0;
  virtual std::string unit() const = 0;  // "character" | "byte"
  virtual std::string to_json() const = 0;
};

// Writes to_json() atomically to `path`.
void save_lm_tokenizer(const LmTokenizer& tokenizer, const std::string& path);
// Reads a tokenizer.json of either kind; throws qkv::Error("<path>: ...") naming the bad key.
std::unique_ptr<LmTokenizer> load_lm_tokenizer(const std::string& path);
std::unique_ptr<LmTokenizer> lm_tokenizer_from_json(const std::string& text,
                                                    const std::string& source);

}  // namespace qkv::train
