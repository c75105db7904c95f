#include "train/commands/run_scoring.h"

#include <algorithm>
#include <filesystem>

#include "engine/error.h"
#include "nn/quantized.h"
#include "nn/safetensors.h"

namespace qkv::cli {

ExactMatch translation_exact_match(const train::Translator& t, const train::TranslationData& data,
                                   int64_t beam) {
  std::vector<std::string> sources;
  for (const auto& p : data.pairs.test) sources.push_back(p.source);
  ExactMatch m;
  for (size_t start = 0; start < sources.size(); start += 256) {
    std::vector<std::string> chunk(
        sources.begin() + int64_t(start),
        sources.begin() + int64_t(std::min(sources.size(), start + 256)));
    std::vector<std::string> outputs = t.translate(chunk, beam);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string& target = data.pairs.test[start + i].target;
      m.correct += outputs[i] == t.target_vocab.decode(t.target_vocab.encode(target));
      ++m.total;
    }
  }
  return m;
}

void load_int8_model(nn::Module& module, const std::string& run_dir) {
  const std::string path = run_dir + "/" + kInt8ModelFile;
  QKV_CHECK(std::filesystem::exists(path), "--int8", path,
            " does not exist; make it with: qkv quantize --run ", run_dir);
  nn::load_quantized_state_dict(module, nn::load_safetensors(path).tensors);
}

void check_int8_source(const std::string& run_dir, const std::string& weights_file) {
  const std::string path = run_dir + "/" + kInt8ModelFile;
  QKV_CHECK(std::filesystem::exists(path), "--int8", path,
            " does not exist; make it with: qkv quantize --run ", run_dir);
  const auto metadata = nn::load_safetensors(path).metadata;
  const auto it = metadata.find("weights");
  const std::string source = it == metadata.end() ? train::kModelFile : it->second;
  QKV_CHECK(source == weights_file, "--int8", path, " was quantized from ", source, ", not ",
            weights_file, "; evaluate it ",
            source == train::kModelFile ? "with --last" : "without --last",
            " or quantize again with the same choice");
}

}  // namespace qkv::cli
