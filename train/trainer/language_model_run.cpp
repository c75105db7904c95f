#include "train/trainer/language_model_run.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "nn/safetensors.h"
#include "train/atomic_file.h"
#include "train/bpe_tokenizer.h"
#include "train/char_tokenizer.h"
#include "train/run_lock.h"
#include "train/trainer/classifier.h"
#include "train/trainer/model_files.h"
#include "train/trainer/translator.h"

namespace qkv::train {

models::GPTConfig gpt_config(const Config& c, int64_t vocab) {
  return {.vocab = vocab,
          .context = c.context,
          .d_model = c.d_model,
          .num_heads = c.heads,
          .num_layers = c.layers,
          .dim_feedforward = c.ff_dim,
          .dropout = c.dropout,
          .positions = c.positional,
          .tie_embeddings = true};
}

std::unique_ptr<LmTokenizer> train_lm_tokenizer(const Config& c, std::string_view text) {
  if (c.tokenizer == "bpe")
    return std::make_unique<BpeTokenizer>(BpeTokenizer::train(text, c.vocab_size));
  QKV_CHECK(c.tokenizer.empty() || c.tokenizer == "char", "--tokenizer",
            "a language model takes char or bpe, got '", c.tokenizer, "'");
  return std::make_unique<CharTokenizer>(CharTokenizer::train(text));
}

void save_gpt_model_json(const std::string& path, const models::GPTConfig& config) {
  const nlohmann::json j = {{"architecture", "GPT"}, {"config", config}};
  write_file_atomic(path, j.dump(2) + "\n");
}

namespace {

int64_t integer_in(const nlohmann::json& config, const char* key, int64_t low, int64_t high,
                   const std::string& source) {
  const std::string where = source + ": config key '" + key + "'";
  if (!config.contains(key)) throw Error(where + " is missing");
  const nlohmann::json& v = config[key];
  if (!v.is_number_integer()) throw Error(where + " must be an integer");
  if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(high)
                             : v.get<int64_t>() < low || v.get<int64_t>() > high)
    throw Error(where + " must be in " + std::to_string(low) + ".." + std::to_string(high) +
                ", got " + v.dump());
  return v.get<int64_t>();
}

// An upper estimate of the parameters (check_model_fits_weights compares it with the weights).
int64_t estimated_parameters(const models::GPTConfig& c) {
  const int64_t d = c.d_model, ff = c.dim_feedforward;
  const int64_t block = 4 * d * d + 4 * d + 2 * d * ff + ff + d + 4 * d;
  return c.vocab * d * (c.tie_embeddings ? 1 : 2) + c.vocab + c.context * d + c.num_layers * block +
         2 * d;
}

}  // namespace

models::GPTConfig parse_gpt_model_json(std::string_view text, const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw Error(source + ": not a JSON object (is the file damaged?)");
  if (!j.contains("architecture") || j["architecture"] != "GPT")
    throw Error(source + ": \"architecture\" must be \"GPT\" for a language-model run");
  if (!j.contains("config") || !j["config"].is_object())
    throw Error(source + ": \"config\" must be an object");
  const nlohmann::json& c = j["config"];
  models::GPTConfig m;
  m.vocab = integer_in(c, "vocab", 2, 1 << 20, source);
  m.context = integer_in(c, "context", 1, 1 << 16, source);
  m.d_model = integer_in(c, "d_model", 1, 1 << 16, source);
  m.num_heads = integer_in(c, "num_heads", 1, m.d_model, source);
  m.num_layers = integer_in(c, "num_layers", 1, 256, source);
  m.dim_feedforward = integer_in(c, "dim_feedforward", 1, 1 << 20, source);
  if (m.d_model % m.num_heads != 0)
    throw Error(source + ": config key 'num_heads' must divide d_model");
  if (!c.contains("dropout") || !c["dropout"].is_number() || !(c["dropout"].get<double>() >= 0) ||
      !(c["dropout"].get<double>() < 1))
    throw Error(source + ": config key 'dropout' must be a number in [0, 1)");
  m.dropout = c["dropout"].get<double>();
  if (!c.contains("positions") || (c["positions"] != "learned" && c["positions"] != "rope"))
    throw Error(source + ": config key 'positions' must be \"learned\" or \"rope\"");
  m.positions = c["positions"].get<std::string>();
  if (!c.contains("tie_embeddings") || !c["tie_embeddings"].is_boolean())
    throw Error(source + ": config key 'tie_embeddings' must be true or false");
  m.tie_embeddings = c["tie_embeddings"].get<bool>();
  return m;
}

LanguageModelRun load_language_model(const std::string& run_dir, bool last) {
  namespace fs = std::filesystem;
  auto path = [&](const char* name) { return (fs::path(run_dir) / name).string(); };
  const std::string architecture = run_architecture(run_dir);  // the folder and model.json exist
  QKV_CHECK(architecture == "GPT", "--run", run_dir, " holds a ", architecture,
            ", not a language model (qkv train lm)");
  const CheckpointLock no_switch_while_loading(run_dir, CheckpointLock::read);
  LanguageModelRun r;
  r.config = load_config(path("config.json"));
  r.model_config = parse_gpt_model_json(read_file(path(kModelJson), "--run"), path(kModelJson));
  QKV_CHECK(fs::exists(path(kTokenizerJson)), "--run", run_dir, " has no ", kTokenizerJson);
  r.tokenizer = load_lm_tokenizer(path(kTokenizerJson));
  QKV_CHECK(r.tokenizer->vocab_size() == r.model_config.vocab, "--run", path(kTokenizerJson),
            " has ", r.tokenizer->vocab_size(), " tokens but ", path(kModelJson), " a vocab of ",
            r.model_config.vocab);
  QKV_CHECK(fs::exists(path("model.safetensors")), "--run", run_dir,
            " has no model.safetensors yet (no checkpoint was written)");
  r.weights = choose_model_weights(run_dir, last);
  const std::string weights_path = path(r.weights.file.c_str());
  nn::TensorMap weights = nn::load_safetensors(weights_path).tensors;
  check_model_fits_weights(estimated_parameters(r.model_config), weights, path(kModelJson),
                           weights_path);
  r.model = std::make_shared<models::GPT>(r.model_config);
  r.model->load_state_dict(weights);
  r.model->eval();
  return r;
}

}  // namespace qkv::train
