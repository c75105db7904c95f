// What a language-model run folder (qkv train lm) can do:
//   qkv sample     text continuing a prompt, drawn token by token through the KV cache
//   qkv eval       loss, bits per character (or byte) and perplexity on a text
//   qkv attention  every block's and head's causal self-attention over a text, as PNG files
// each from the best validation model (best.safetensors) unless --last names the last checkpoint.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/autocast.h"
#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "models/attention_maps.h"
#include "train/atomic_file.h"
#include "train/char_tokenizer.h"
#include "train/commands/commands.h"
#include "train/lm_data.h"
#include "train/plots.h"
#include "train/png.h"
#include "train/sampling.h"
#include "train/trainer/language_model_run.h"
#include "train/trainer/lm_trainer.h"
#include "train/trainer/precision.h"
#include "train/trainer/translator.h"
#include "train/utf8.h"
#include "train/utf8_offset.h"

namespace qkv::cli {

namespace {

// The code point of one valid UTF-8 character.
uint32_t code_point(const std::string& character) {
  const auto byte = [&](size_t i) { return uint32_t(uint8_t(character[i])); };
  switch (character.size()) {
    case 1:
      return byte(0);
    case 2:
      return (byte(0) & 0x1f) << 6 | (byte(1) & 0x3f);
    case 3:
      return (byte(0) & 0x0f) << 12 | (byte(1) & 0x3f) << 6 | (byte(2) & 0x3f);
    default:
      return (byte(0) & 0x07) << 18 | (byte(1) & 0x3f) << 12 | (byte(2) & 0x3f) << 6 |
             (byte(3) & 0x3f);
  }
}

// The characters of `text` that a char tokenizer has no id for, each once, in order:
// "'Z', 'é' (U+00E9)". Empty for a BPE tokenizer, which encodes any bytes.
std::string characters_outside(const train::LmTokenizer& tokenizer, const std::string& text) {
  if (tokenizer.kind() != "char") return "";
  std::string listed, seen;
  for (size_t i = 0; i < text.size();) {
    const size_t n = train::utf8_sequence_length(text, i);
    const std::string character = text.substr(i, n);
    i += n;
    if (tokenizer.encode(character, /*allow_unknown=*/true)[0] != train::CharTokenizer::UNK)
      continue;
    if (seen.find("\x1f" + character + "\x1f") != std::string::npos) continue;
    seen += "\x1f" + character + "\x1f";
    char code[16];
    const uint32_t cp = code_point(character);
    std::snprintf(code, sizeof code, "U+%04X", unsigned(cp));
    const bool printable = cp >= 0x20 && cp != 0x7f;
    listed += (listed.empty() ? "" : ", ") +
              (printable ? "'" + character + "' (" + code + ")" : std::string(code));
  }
  return listed;
}

// The prompt's token ids; throws naming --prompt for an empty one, one that is not UTF-8, or one
// holding characters the run's char vocabulary lacks.
std::vector<int64_t> prompt_ids(const train::LmTokenizer& tokenizer, const std::string& prompt,
                                const std::string& run) {
  QKV_CHECK(!prompt.empty(), "--prompt", "must hold at least one character");
  QKV_CHECK(train::is_valid_utf8(prompt), "--prompt", "is not valid UTF-8 text");
  const std::string outside = characters_outside(tokenizer, prompt);
  QKV_CHECK(outside.empty(), "--prompt", "has characters that the training text of ", run,
            " never held: ", outside);
  return tokenizer.encode(prompt);
}

}  // namespace

int sample_command(const SampleOptions& o) {
  const train::SamplingOptions sampling{
      .temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p};
  train::check_sampling_options(sampling);
  train::LanguageModelRun r = train::load_language_model(o.run, o.last);
  const std::vector<int64_t> prompt = prompt_ids(*r.tokenizer, o.prompt, o.run);
  Generator gen(o.seed);
  const std::vector<int64_t> ids =
      train::generate(*r.model, prompt, o.tokens, sampling, gen, /*use_cache=*/!o.no_cache);
  const std::string text = r.tokenizer->decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

int language_model_eval(const EvalOptions& o) {
  QKV_CHECK(!o.int8, "--int8", "qkv quantize makes no int8 model of a language-model run");
  QKV_CHECK(o.beam == 1, "--beam", "a language model is scored, not decoded: leave out --beam");
  const Device device = train::parse_device(o.device);
  if (!device.is_cpu()) backend_for(device);  // "device: cuda:0 is not available: ..."
  const Autocast precision(train::compute_dtype(o.precision));
  train::LanguageModelRun r = train::load_language_model(o.run, o.last);
  if (!device.is_cpu()) r.model->to(device);
  // Without --data: the run's own validation split, cut from its --data as in training.
  std::string text, what;
  if (o.data.empty()) {
    text = train::read_lm_text(r.config.data, r.config.valid_fraction).valid;
    what = "the validation split of " + r.config.data;
  } else {
    text = train::read_file(o.data, "--data");
    QKV_CHECK(train::is_valid_utf8(text), "--data", o.data, " is not valid UTF-8 text");
    what = o.data;
  }
  const std::vector<int64_t> ids = r.tokenizer->encode(text, /*allow_unknown=*/true);
  const std::string outside = characters_outside(*r.tokenizer, text);
  if (!outside.empty())
    std::fprintf(stderr,
                 "qkv: warning: %s has characters the run never saw (%s%s); they read as "
                 "<unk>\n",
                 what.c_str(), outside.substr(0, 200).c_str(), outside.size() > 200 ? ", ..." : "");
  const train::TokenWindows windows(ids, r.model_config.context, what);
  std::vector<int64_t> units(size_t(r.tokenizer->vocab_size()));
  for (int64_t id = 0; id < r.tokenizer->vocab_size(); ++id)
    units[size_t(id)] = r.tokenizer->units(id);
  const Tensor all = windows.sequential_windows(windows.size());
  const train::LmLoss l = train::evaluate_lm(*r.model, all, units, 64);
  const int64_t scored = all.size(0) * r.model_config.context;
  std::printf(
      "loss %.4f nats per token, %.4f bits per %s, perplexity %.3f (%lld tokens of %s; %s)\n",
      l.nats_per_token, l.bits_per_unit, r.tokenizer->unit().c_str(), std::exp(l.nats_per_token),
      (long long)scored, what.c_str(), r.weights.describe().c_str());
  return 0;
}

int language_model_attention(const AttentionOptions& o) {
  train::LanguageModelRun r = train::load_language_model(o.run, o.last);
  const std::vector<int64_t> ids = prompt_ids(*r.tokenizer, o.text, o.run);
  QKV_CHECK(int64_t(ids.size()) <= r.model_config.context, "attention", "the text has ", ids.size(),
            " tokens, more than the model's context of ", r.model_config.context);
  std::vector<std::string> tokens;
  for (int64_t id : ids) tokens.push_back(r.tokenizer->decode({id}));
  NoGrad no_grad;
  models::set_record_attention(*r.model->blocks, true);
  r.model->forward(tensor_i64(ids, {1, int64_t(ids.size())}));
  std::vector<models::AttentionMap> maps;
  models::append_attention_maps(*r.model->blocks, "block", maps);
  models::set_record_attention(*r.model->blocks, false);
  std::filesystem::create_directories(o.out);
  for (const auto& map : maps) {
    const int64_t heads = map.weights.size(1), rows = map.weights.size(2),
                  cols = map.weights.size(3);
    const std::vector<float> all = map.weights.contiguous().to_vector<float>();
    std::vector<std::vector<float>> per_head;
    for (int64_t h = 0; h < heads; ++h)
      per_head.emplace_back(all.begin() + h * rows * cols, all.begin() + (h + 1) * rows * cols);
    const std::string path = (std::filesystem::path(o.out) / (map.name + ".png")).string();
    train::write_png(path, train::attention_grid(per_head, tokens, tokens,
                                                 map.name + " (causal): \"" + o.text + "\""));
    std::printf("%s\n", path.c_str());
  }
  return 0;
}

}  // namespace qkv::cli
