// The character tokenizer of the language model: one id per Unicode code point of the training
// split, in code point order, after id 0, which is <unk>.
//
// Unknown code points (in the validation split or a prompt, never seen in training) are a
// decision, not an accident: encode() refuses them with an error naming the character and its
// byte offset, and only encode(text, allow_unknown = true) - what the validation split uses, so
// that a rare character near the end of a file does not stop training - maps them to <unk>, which
// decodes to U+FFFD. Every text made of known characters round-trips exactly.
#pragma once

#include <map>

#include "train/lm_tokenizer.h"

namespace qkv::train {

class CharTokenizer : public LmTokenizer {
 public:
  static constexpr int64_t UNK = 0;
  // The code points of `text` (valid UTF-8; throws naming the byte offset otherwise).
  static CharTokenizer train(std::string_view text);
  static CharTokenizer from_json(const std::string& text, const std::string& source);

  std::string kind() const override { return "char"; }
  int64_t vocab_size() const override { return int64_t(characters_.size()) + 1; }
  std::vector<int64_t> encode(std::string_view text, bool allow_unknown = false) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t units(int64_t) const override { return 1; }
  std::string unit() const override { return "character"; }
  std::string to_json() const override;

 private:
  void add(const std::string& character);
  std::vector<std::string> characters_;  // id - 1 -> the character's UTF-8 bytes
  std::map<std::string, int64_t> ids_;   // and back
};

}  // namespace qkv::train
