#include "train/lm_tokenizer.h"

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "train/atomic_file.h"
#include "train/bpe_tokenizer.h"
#include "train/char_tokenizer.h"

namespace qkv::train {

void save_lm_tokenizer(const LmTokenizer& tokenizer, const std::string& path) {
  write_file_atomic(path, tokenizer.to_json());
}

std::unique_ptr<LmTokenizer> lm_tokenizer_from_json(const std::string& text,
                                                    const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": not JSON: " + e.what());
  }
  const std::string format = j.is_object() && j.contains("format") && j["format"].is_string()
                                 ? j["format"].get<std::string>()
                                 : "";
  if (format == "qkv-char")
    return std::make_unique<CharTokenizer>(CharTokenizer::from_json(text, source));
  if (format == "qkv-bpe")
    return std::make_unique<BpeTokenizer>(BpeTokenizer::from_json(text, source));
  throw Error(source + ": key 'format' must be \"qkv-char\" or \"qkv-bpe\"");
}

std::unique_ptr<LmTokenizer> load_lm_tokenizer(const std::string& path) {
  return lm_tokenizer_from_json(read_file(path, "tokenizer"), path);
}

}  // namespace qkv::train
