#include "train/config.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "train/atomic_file.h"
#include "train/utf8.h"

namespace qkv::train {

using nlohmann::json;

const std::vector<ConfigField>& config_fields() {
  using C = Config;
  static const std::vector<ConfigField> fields = {
      {"task", &C::task, {}, "toy task or data kind"},
      {"data",
       &C::data,
       {},
       "path of the TSV file for pairs / classify, or the IDX folder for fashion-mnist"},
      {"tokenizer", &C::tokenizer, {"", "char", "whitespace"}, "how text becomes tokens"},
      {"min_frequency", &C::min_frequency, {}, "rarer tokens become <unk>"},
      {"train_size", &C::train_size, {}, "training examples"},
      {"valid_size", &C::valid_size, {}, "validation examples"},
      {"test_size", &C::test_size, {}, "test examples"},
      {"min_length", &C::min_length, {}, "shortest generated sequence"},
      {"max_length", &C::max_length, {}, "longest generated sequence"},
      {"max_len", &C::max_len, {}, "truncate batches' sequences to this many tokens"},
      {"d_model", &C::d_model, {}, "model width"},
      {"heads", &C::heads, {}, "attention heads"},
      {"layers", &C::layers, {}, "encoder and decoder layers"},
      {"ff_dim", &C::ff_dim, {}, "feed-forward hidden width"},
      {"dropout", &C::dropout, {}, "dropout probability"},
      {"positional",
       &C::positional,
       {"sinusoidal", "learned", "relative", "rope", "alibi"},
       "positional encoding"},
      {"model", &C::model, {"cnn", "vit"}, "image classifier"},
      {"attention", &C::attention, {"none", "se", "cbam"}, "attention in the CNN's blocks"},
      {"channels", &C::channels, {}, "CNN widths, one residual block each, e.g. 16,32"},
      {"patch_size", &C::patch_size, {}, "ViT patch size (divides the image size)"},
      {"pooling", &C::pooling, {"cls", "mean"}, "text classifier: [CLS] state or mean of states"},
      {"optimizer", &C::optimizer, {"adamw", "sgd"}, "optimizer"},
      {"batch_size", &C::batch_size, {}, "examples per step"},
      {"steps", &C::steps, {}, "optimizer steps"},
      {"lr", &C::lr, {}, "peak learning rate"},
      {"weight_decay", &C::weight_decay, {}, "decoupled weight decay"},
      {"beta1", &C::beta1, {}, "Adam beta1"},
      {"beta2", &C::beta2, {}, "Adam beta2"},
      {"warmup", &C::warmup, {}, "linear warm-up steps"},
      {"schedule",
       &C::schedule,
       {"constant", "linear", "cosine", "noam"},
       "lr schedule (after warmup)"},
      {"clip", &C::clip, {}, "max gradient norm (0 = off)"},
      {"label_smoothing", &C::label_smoothing, {}, "label smoothing of the loss"},
      {"bucket_by_length", &C::bucket_by_length, {}, "batch similar lengths together"},
      {"eval_every", &C::eval_every, {}, "steps between evaluations"},
      {"log_every", &C::log_every, {}, "steps between log lines"},
      {"checkpoint_every", &C::checkpoint_every, {}, "steps between checkpoints (0 = end only)"},
      {"beam", &C::beam, {}, "beam width (1 = greedy)"},
      {"target_metric",
       &C::target_metric,
       {"", "exact_match", "token_accuracy", "accuracy"},
       "validation metric for target_value and patience (default: the task's main one)"},
      {"target_value", &C::target_value, {}, "stop when the metric reaches it (0 = never)"},
      {"patience", &C::patience, {}, "evaluations without improvement before stopping (0 = never)"},
      {"seed", &C::seed, {}, "seed of data, initialization and dropout"},
      {"threads", &C::threads, {}, "CPU threads (0 = all)"},
      {"device", &C::device, {}, "cpu, cuda or cuda:N"},
      {"precision", &C::precision, {"fp32", "bf16"}, "compute precision"},
      {"out", &C::out, {}, "run folder"},
      {"pictures", &C::pictures, {}, "draw attention maps and curves"},
      {"trace",
       &C::trace,
       {},
       "print each attention layer's Q/K/V shapes, score ranges, row sums and entropy for the "
       "first batch"},
      {"checkpoint_activations",
       &C::checkpoint_activations,
       {},
       "recompute each layer's activations in backward (less memory, ~30% more time)"},
  };
  return fields;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  // One row of the dynamic-programming table at a time.
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_config_key(const std::string& key) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& f : config_fields()) {
    size_t d = edit_distance(key, f.key);
    if (d < best_distance) best = f.key, best_distance = d;
  }
  return best;
}

namespace {

const ConfigField& find_field(const std::string& key, const std::string& source) {
  for (const auto& f : config_fields())
    if (f.key == key) return f;
  throw Error(source + ": unknown key '" + key + "' (did you mean '" + closest_config_key(key) +
              "'?)");
}

std::string json_type(const json& v) {
  if (v.is_number_integer()) return "an integer " + v.dump();
  if (v.is_number()) return "a number " + v.dump();
  // dump() recurses once per nesting level: a config holding [[[[...]]]] 100,000 deep overflowed
  // the stack while its error message was being written.
  if (v.is_structured()) return std::string("an ") + v.type_name();
  return std::string(v.type_name()) + " " + v.dump();
}

void set_field(Config& c, const ConfigField& f, const json& v, const std::string& source) {
  const std::string where = source + ": key '" + f.key + "'";
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) throw Error(where + " must be a string, got " + json_type(v));
          std::string s = v.get<std::string>();
          if (!f.choices.empty() &&
              std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end()) {
            std::string valid;
            for (const auto& ch : f.choices)
              if (!ch.empty()) valid += (valid.empty() ? "" : ", ") + ch;
            throw Error(where + " must be one of " + valid + ", got \"" + s + "\"");
          }
          c.*member = s;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) throw Error(where + " must be true or false, got " + json_type(v));
          c.*member = v.get<bool>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) throw Error(where + " must be a number, got " + json_type(v));
          c.*member = v.get<double>();
        } else {  // int64_t or uint64_t
          if (!v.is_number_integer())
            throw Error(where + " must be an integer, got " + json_type(v));
          if (std::is_unsigned_v<T> && !v.is_number_unsigned())
            throw Error(where + " must not be negative, got " + v.dump());
          // get<int64_t>() would silently wrap 2^63 and above to a negative number.
          if (std::is_signed_v<T> && v.is_number_unsigned() &&
              v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
            throw Error(where + " is out of range, got " + v.dump());
          c.*member = v.get<T>();
        }
      },
      f.member);
}

}  // namespace

void apply_config_json(Config& config, const json& j, const std::string& source) {
  if (!j.is_object())
    throw Error(source + ": a config must be a JSON object, got " + j.type_name());
  for (const auto& [key, value] : j.items())
    set_field(config, find_field(key, source), value, source);
}

void set_config_value(Config& config, const std::string& key, const std::string& value,
                      const std::string& source) {
  const ConfigField& f = find_field(key, source);
  json v = json::parse(value, nullptr, /*allow_exceptions=*/false);
  // A string field takes the text as it is ("--task 1" is the task named "1", "--out x" a path).
  if (v.is_discarded() || std::holds_alternative<std::string Config::*>(f.member)) {
    // Taken as text, it goes into config.json: JSON holds only UTF-8 (found by fuzz_overrides:
    // `--out $'\xf0x'` made writing config.json throw a JSON library error).
    if (!is_valid_utf8(value))
      throw Error(source + ": the value of '" + key + "' is not valid UTF-8 text");
    v = value;
  }
  set_field(config, f, v, source);
}

Config load_config(const std::string& path) {
  return parse_config(read_file(path, "--config"), path);
}

Config parse_config(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw Error(source + ": not valid JSON: " + e.what());
  }
  Config config;
  apply_config_json(config, j, source);
  return config;
}

json config_to_json(const Config& config) {
  json j = json::object();
  for (const auto& f : config_fields())
    std::visit([&](auto member) { j[f.key] = config.*member; }, f.member);
  return j;
}

void save_config(const Config& config, const std::string& path) {
  write_file_atomic(path, config_to_json(config).dump(2) + "\n");
}

void validate_config(const Config& c, const std::string& source) {
  auto require = [&](bool ok, const std::string& key, const std::string& why) {
    if (!ok) throw Error(source + ": key '" + key + "' " + why);
  };
  require(c.d_model > 0, "d_model", "must be positive, got " + std::to_string(c.d_model));
  require(c.heads > 0, "heads", "must be positive, got " + std::to_string(c.heads));
  require(c.d_model % c.heads == 0, "heads",
          "must divide d_model (" + std::to_string(c.d_model) + " is not divisible by " +
              std::to_string(c.heads) + ")");
  require(c.layers > 0, "layers", "must be positive");
  require(c.ff_dim > 0, "ff_dim", "must be positive");
  require(c.dropout >= 0 && c.dropout < 1, "dropout", "must be in [0, 1)");
  require(c.batch_size > 0, "batch_size", "must be positive");
  require(c.steps > 0, "steps", "must be positive");
  require(c.lr > 0, "lr", "must be positive");
  require(c.warmup >= 0, "warmup", "must not be negative");
  require(c.clip >= 0, "clip", "must not be negative");
  require(c.label_smoothing >= 0 && c.label_smoothing < 1, "label_smoothing", "must be in [0, 1)");
  require(c.eval_every > 0, "eval_every", "must be positive");
  require(c.beam >= 1, "beam", "must be at least 1");
  require(c.min_frequency >= 1, "min_frequency", "must be at least 1");
  require(c.min_length >= 1 && c.min_length <= c.max_length, "min_length",
          "must be in 1..max_length");
  require(c.train_size > 0, "train_size", "must be positive");
  require(c.valid_size >= 0 && c.test_size >= 0, "valid_size",
          "and test_size must not be negative");
  require(c.patch_size > 0, "patch_size", "must be positive");
  require(!c.channels.empty() && c.channels.find_first_not_of("0123456789, ") == std::string::npos,
          "channels",
          "must be a comma-separated list of widths such as 16,32, got \"" + c.channels + "\"");
  require(c.threads >= 0, "threads", "must not be negative");
  require(c.device == "cpu" || c.device.rfind("cuda", 0) == 0, "device",
          "must be cpu, cuda or cuda:N, got \"" + c.device + "\"");
}

}  // namespace qkv::train
