// Byte-level BPE (Sennrich et al. 2016; GPT-2's byte-level variant): ids 0..255 are the bytes,
// and each learned merge adds one id standing for two earlier ones side by side.
//
// Training splits the text into chunks (a word, a run of punctuation or of spaces; one leading
// space stays with the word or punctuation after it, as in GPT-2), so that no merge crosses a chunk
// boundary, then repeatedly merges the most frequent adjacent pair of ids within chunks. Ties go to
// the smallest pair (first id, then second), so the same text always gives the same merges; it
// stops at vocab_size ids or when no pair occurs twice. Encoding applies the merges to each chunk
// in the order they were learned. Since every byte is an id, any byte string encodes, and decoding
// concatenates the tokens' bytes: encode then decode gives back the exact input, seen or not.
#pragma once

#include <unordered_map>
#include <utility>

#include "train/lm_tokenizer.h"

namespace qkv::train {

// The chunks of `text` that BPE merges within (see above); they concatenate to `text`.
std::vector<std::string_view> bpe_chunks(std::string_view text);

class BpeTokenizer : public LmTokenizer {
 public:
  static constexpr int kFormatVersion = 1;
  // vocab_size >= 256 (throws naming --vocab-size otherwise).
  static BpeTokenizer train(std::string_view text, int64_t vocab_size);
  static BpeTokenizer from_json(const std::string& text, const std::string& source);

  std::string kind() const override { return "bpe"; }
  int64_t vocab_size() const override { return int64_t(pieces_.size()); }
  std::vector<int64_t> encode(std::string_view text, bool allow_unknown = false) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t units(int64_t id) const override;
  std::string unit() const override { return "byte"; }
  std::string to_json() const override;

  // Merge i makes id 256 + i from these two ids.
  const std::vector<std::pair<int64_t, int64_t>>& merges() const { return merges_; }
  const std::string& piece(int64_t id) const;  // the bytes id stands for

 private:
  BpeTokenizer();
  void add_merge(int64_t a, int64_t b);
  std::vector<int64_t> encode_chunk(std::string_view chunk) const;
  std::vector<std::pair<int64_t, int64_t>> merges_;
  std::vector<std::string> pieces_;
  std::unordered_map<uint64_t, int64_t> rank_;  // pair key -> merge index
};

}  // namespace qkv::train
