#include "train/trainer/translator.h"

#include <filesystem>

#include "engine/error.h"
#include "engine/ops.h"
#include "nn/safetensors.h"
#include "train/atomic_file.h"
#include "train/batching.h"
#include "train/dataset.h"
#include "train/run_lock.h"
#include "train/trainer/model_files.h"

namespace qkv::train {

Device parse_device(const std::string& name) {
  if (!is_device_name(name))
    throw Error("--device: expected cpu, cuda or cuda:N (N a device number), got '" + name + "'");
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  return Device::cuda(std::stoi(name.substr(5)));  // at most four digits: no overflow
}

models::Seq2SeqConfig seq2seq_config(const Config& c, int64_t src_vocab, int64_t tgt_vocab) {
  models::Seq2SeqConfig m;
  m.src_vocab = src_vocab;
  m.tgt_vocab = tgt_vocab;
  m.d_model = c.d_model;
  m.num_heads = c.heads;
  m.num_encoder_layers = m.num_decoder_layers = c.layers;
  m.dim_feedforward = c.ff_dim;
  m.dropout = c.dropout;
  m.max_len = std::max<int64_t>(c.max_len, 64) + 2;  // room for BOS/EOS
  m.positional = c.positional;
  m.pad_id = Vocab::PAD;
  m.checkpoint_activations = c.checkpoint_activations;
  return m;
}

void save_model_json(const std::string& path, const models::Seq2SeqConfig& config,
                     int64_t decode_max_len) {
  nlohmann::json j = {{"architecture", "Seq2SeqTransformer"},
                      {"config", config},
                      {"decode_max_len", decode_max_len}};
  write_file_atomic(path, j.dump(2) + "\n");
}

Translator load_translator(const std::string& run_dir, const std::string& weights_file) {
  namespace fs = std::filesystem;
  QKV_CHECK(fs::is_directory(run_dir), "--run", "no run folder at '", run_dir, "'");
  const CheckpointLock no_switch_while_loading(run_dir, CheckpointLock::read);
  auto path = [&](const std::string& name) {
    std::string p = (fs::path(run_dir) / name).string();
    QKV_CHECK(fs::exists(p), "--run", run_dir, " has no ", name,
              " (was it made by `qkv train translate`, and did it save a checkpoint?)");
    return p;
  };
  Translator t;
  t.config = load_config(path("config.json"));
  t.source_vocab = Vocab::load(path(kSourceVocab));
  t.target_vocab = Vocab::load(path(kTargetVocab));
  // A vocabulary file whose "tokenizer" was switched may still hold only tokens the other
  // tokenizer produces; config.json says which one the model was trained with.
  const TokenizerChoice kinds = run_tokenizers(t.config);
  check_vocab_tokenizer(t.source_vocab, kinds.source, path(kSourceVocab));
  check_vocab_tokenizer(t.target_vocab, kinds.target, path(kTargetVocab));
  TranslatorModelJson m =
      parse_translator_model_json(read_file(path(kModelJson), "--run"), path(kModelJson));
  t.model_config = m.config;
  t.decode_max_len = m.decode_max_len;
  QKV_CHECK(t.model_config.src_vocab == int64_t(t.source_vocab.size()) &&
                t.model_config.tgt_vocab == int64_t(t.target_vocab.size()),
            "--run", run_dir, ": the vocabularies (", t.source_vocab.size(), ", ",
            t.target_vocab.size(), " tokens) do not match the model (", t.model_config.src_vocab,
            ", ", t.model_config.tgt_vocab, ")");
  const nn::TensorMap weights = nn::load_safetensors(path(weights_file)).tensors;
  check_model_fits_weights(estimated_parameters(t.model_config), weights, path(kModelJson),
                           path(weights_file));
  // The weights fit a model.json edited to other heads just as well: config.json says which.
  const std::string differences = model_config_differences(
      nlohmann::json(m.config),
      nlohmann::json(seq2seq_config(t.config, m.config.src_vocab, m.config.tgt_vocab)));
  QKV_CHECK(differences.empty(), "--run", path(kModelJson),
            " does not describe the model the run's config.json builds: ", differences,
            " (was model.json edited?)");
  t.model = std::make_shared<models::Seq2SeqTransformer>(t.model_config);
  t.model->load_state_dict(weights);
  t.model->eval();
  t.device = Device::cpu();
  return t;
}

void Translator::move_to(Device to) {
  if (to == device) return;
  model->to(to);
  device = to;
}

void Translator::check_inputs(const std::vector<std::string>& texts, const char* op) const {
  for (size_t i = 0; i < texts.size(); ++i) {
    const size_t tokens = source_vocab.encode(texts[i]).size();
    QKV_CHECK(tokens > 0, op, "text ", i + 1, " is empty: nothing to translate");
    QKV_CHECK(int64_t(tokens) <= config.max_len, op, "text ", i + 1, " has ", tokens,
              " tokens, more than the model's max_len of ", config.max_len,
              " (config.json of the run)");
  }
}

std::vector<std::string> Translator::translate(const std::vector<std::string>& texts, int64_t beam,
                                               std::vector<std::vector<int64_t>>* ids) const {
  std::vector<Example> examples;
  for (const auto& text : texts) examples.push_back({source_vocab.encode(text), {}, -1});
  std::vector<size_t> all(examples.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  Batch batch = make_batch(examples, all, config.max_len);
  NoGrad no_grad;
  Tensor src = batch.src.to(device), mask = batch.src_pad_mask.to(device);
  Tensor out = beam > 1
                   ? model->beam_search(src, mask, Vocab::BOS, Vocab::EOS, decode_max_len, beam)
                   : model->greedy_decode(src, mask, Vocab::BOS, Vocab::EOS, decode_max_len);
  const int64_t rows = out.size(0), cols = out.size(1);
  std::vector<int64_t> flat = out.to_vector<int64_t>();
  std::vector<std::string> result;
  if (ids) ids->clear();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> row(flat.begin() + r * cols, flat.begin() + (r + 1) * cols);
    result.push_back(target_vocab.decode(row));
    if (ids) ids->push_back(row);
  }
  return result;
}

}  // namespace qkv::train
