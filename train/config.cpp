#include "train/config.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "models/classifier_names.h"
#include "nn/positional_names.h"
#include "nn/residual_block_names.h"
#include "nn/unique_keys_json.h"
#include "train/atomic_file.h"
#include "train/tasks/task_table.h"
#include "train/tokenizer.h"
#include "train/trainer/run_choices.h"
#include "train/utf8.h"

namespace qkv::train {

using nlohmann::json;

namespace {

// Ranges: [low, high] unless marked open. The upper ends are far beyond anything qkv trains, so
// they only stop numbers that would overflow a size or a loop (and typos such as 1e12 steps).
Range closed(double low, double high) { return {low, high, false, false}; }
Range below(double low, double high) { return {low, high, false, true}; }  // [low, high)
// (0, inf): the learning rate has no upper end, since a huge one is how a run's divergence (and
// the NaN report) is tested.
Range positive() { return {0, std::numeric_limits<double>::infinity(), true, true}; }
constexpr double kCount = 1e9;     // steps, intervals, patience
constexpr double kExamples = 1e8;  // split sizes
constexpr auto kMayChange = OnResume::may_change;

// "" (the task's natural tokenizers), the name of a TokenizerKind, or the language model's
// byte-level BPE.
std::vector<std::string> tokenizer_choices() {
  return {"", to_string(TokenizerKind::character), to_string(TokenizerKind::whitespace), "bpe"};
}

}  // namespace

std::string Range::describe(bool integer) const {
  auto number = [&](double v) {
    if (integer) return std::to_string(int64_t(v));
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return std::string(text);
  };
  if (integer) return number(low) + ".." + number(high);
  std::string text(low_open ? "(" : "[");
  text += number(low);
  text += ", ";
  text += number(high);
  text += high_open ? ")" : "]";
  return text;
}

const std::vector<ConfigField>& config_fields() {
  using C = Config;
  static const std::vector<ConfigField> fields = {
      {"task", &C::task, all_task_names(), "toy task or data kind"},
      {"data",
       &C::data,
       {},
       "path of the TSV file for pairs / classify, or the IDX folder for fashion-mnist"},
      {"tokenizer", &C::tokenizer, tokenizer_choices(), "how text becomes tokens"},
      {"min_frequency", &C::min_frequency, {}, "rarer tokens become <unk>", closed(1, kCount)},
      {"train_size", &C::train_size, {}, "training examples", closed(1, kExamples)},
      {"valid_size",
       &C::valid_size,
       {},
       "validation examples (0 = 10% of a corpus, at most 1000; 1000 of a generated task)",
       closed(0, kExamples)},
      {"test_size",
       &C::test_size,
       {},
       "test examples (0 = 10% of a corpus, at most 1000; 1000 of a generated task)",
       closed(0, kExamples)},
      {"min_length", &C::min_length, {}, "shortest generated sequence", closed(1, 1000)},
      {"max_length", &C::max_length, {}, "longest generated sequence", closed(1, 1000)},
      {"max_len",
       &C::max_len,
       {},
       "truncate batches' sequences to this many tokens",
       closed(1, 1 << 16)},
      {"context",
       &C::context,
       {},
       "language model: tokens it sees at once (and learns positions for)",
       closed(1, 1 << 16)},
      {"valid_fraction",
       &C::valid_fraction,
       {},
       "language model: the last part of --data kept for validation",
       {0, 1, true, true}},
      {"vocab_size",
       &C::vocab_size,
       {},
       "language model, --tokenizer bpe: at most this many tokens",
       closed(256, 1 << 20)},
      {"d_model", &C::d_model, {}, "model width", closed(1, 1 << 16)},
      {"heads", &C::heads, {}, "attention heads", closed(1, 1 << 16)},
      {"layers", &C::layers, {}, "encoder and decoder layers", closed(1, 256)},
      {"ff_dim", &C::ff_dim, {}, "feed-forward hidden width", closed(1, 1 << 20)},
      {"dropout", &C::dropout, {}, "dropout probability", below(0, 1)},
      {"positional", &C::positional, nn::positional_encoding_names(), "positional encoding"},
      {"model", &C::model, models::image_classifier_names(), "image classifier"},
      {"attention", &C::attention, nn::block_attention_names(), "attention in the CNN's blocks"},
      {"channels", &C::channels, {}, "CNN widths, one residual block each, e.g. 16,32"},
      {"patch_size", &C::patch_size, {}, "ViT patch size (divides the image size)", closed(1, 28)},
      {"pooling", &C::pooling, models::pooling_names(),
       "text classifier: [CLS] state or mean of states"},
      {"optimizer", &C::optimizer, optimizer_names(), "optimizer"},
      {"batch_size", &C::batch_size, {}, "examples per step", closed(1, 1 << 20)},
      {"steps",
       &C::steps,
       {},
       "optimizer steps (0 = from the data size, or --epochs)",
       closed(0, kCount),
       kMayChange},
      {"epochs",
       &C::epochs,
       {},
       "passes over the training split, instead of --steps (0 = from the data size)",
       closed(0, kCount),
       kMayChange},
      {"lr", &C::lr, {}, "peak learning rate", positive(), kMayChange},
      {"weight_decay", &C::weight_decay, {}, "decoupled weight decay", closed(0, 100), kMayChange},
      {"beta1", &C::beta1, {}, "Adam beta1", below(0, 1), kMayChange},
      {"beta2", &C::beta2, {}, "Adam beta2", below(0, 1), kMayChange},
      {"warmup", &C::warmup, {}, "linear warm-up steps", closed(0, kCount), kMayChange},
      {"schedule", &C::schedule, schedule_names(), "lr schedule (after warmup)", {}, kMayChange},
      {"clip", &C::clip, {}, "max gradient norm (0 = off)", closed(0, 1e9), kMayChange},
      {"label_smoothing",
       &C::label_smoothing,
       {},
       "label smoothing of the loss",
       below(0, 1),
       kMayChange},
      {"bucket_by_length", &C::bucket_by_length, {}, "batch similar lengths together"},
      {"accumulate",
       &C::accumulate,
       {},
       "micro-batches per optimizer step (gradient accumulation)",
       closed(1, 1024),
       kMayChange},
      {"dp_overlap",
       &C::dp_overlap,
       {"on", "off"},
       "data-parallel gradient reduction during backward (on) or after it (off)",
       {},
       kMayChange},
      {"eval_every",
       &C::eval_every,
       {},
       "steps between evaluations",
       closed(1, kCount),
       kMayChange},
      {"log_every", &C::log_every, {}, "steps between log lines", closed(1, kCount), kMayChange},
      {"checkpoint_every",
       &C::checkpoint_every,
       {},
       "steps between checkpoints (0 = end only)",
       closed(0, kCount),
       kMayChange},
      {"beam", &C::beam, {}, "beam width (1 = greedy)", closed(1, 64), kMayChange},
      {"target_metric",
       &C::target_metric,
       {"", "exact_match", "token_accuracy", "accuracy"},
       "validation metric for target_value and patience (default: the task's main one)",
       {},
       kMayChange},
      {"target_value",
       &C::target_value,
       {},
       "stop when the metric reaches it (0 = never; a fraction for accuracies, nats for a loss)",
       closed(0, kCount),
       kMayChange},
      {"patience",
       &C::patience,
       {},
       "evaluations without improvement before stopping (0 = never)",
       closed(0, kCount),
       kMayChange},
      {"last",
       &C::last,
       {},
       "test the last weights after training, not the best validation model (best.safetensors)",
       {},
       kMayChange},
      {"seed", &C::seed, {}, "seed of data, initialization and dropout", closed(0, 1.8e19)},
      {"threads", &C::threads, {}, "CPU threads (0 = all)", closed(0, 1024), kMayChange},
      {"device", &C::device, {}, "cpu, cuda or cuda:N", {}, kMayChange},
      {"precision", &C::precision, precision_names(), "compute precision", {}, kMayChange},
      {"out", &C::out, {}, "run folder", {}, kMayChange},
      {"pictures", &C::pictures, {}, "draw attention maps and curves", {}, kMayChange},
      {"trace",
       &C::trace,
       {},
       "print each attention layer's Q/K/V shapes, score ranges, row sums and entropy for the "
       "first batch",
       {},
       kMayChange},
      {"profile",
       &C::profile,
       {},
       "profile this many steps after the warm-up ones: per-op table, trace.json, trace.png",
       closed(0, 1000),
       kMayChange},
      {"profile_warmup",
       &C::profile_warmup,
       {},
       "unprofiled steps before --profile's, so that the allocator has seen every batch shape",
       closed(0, 1000000),
       kMayChange},
      {"checkpoint_activations",
       &C::checkpoint_activations,
       {},
       "recompute each layer's activations in backward (less memory, ~30% more time)",
       {},
       kMayChange},
  };
  return fields;
}

std::string closest_config_key(const std::string& key) {
  std::vector<std::string> keys;
  for (const auto& f : config_fields()) keys.push_back(f.key);
  return closest_name(key, keys);
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
  // dump() recurses once per nesting level, so a config holding [[[[...]]]] 100,000 deep would
  // overflow the stack while its error message is written: structures are named, not printed.
  if (v.is_structured()) return std::string("an ") + v.type_name();
  return std::string(v.type_name()) + " " + v.dump();
}

void check_range(const ConfigField& f, double value, bool integer, const std::string& where,
                 const std::string& given) {
  if (!f.range.contains(value))
    throw Error(where + " must be in " + f.range.describe(integer) + ", got " + given);
}

void set_field(Config& c, const ConfigField& f, const json& v, const std::string& source) {
  // A flag ("--steps") names itself; a file or other source names the key in it.
  const std::string where = source.rfind("--", 0) == 0 ? source : source + ": key '" + f.key + "'";
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
            throw Error(where + " must be one of " + valid + ", got \"" + s + "\"" +
                        did_you_mean(s, f.choices));
          }
          c.*member = s;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) throw Error(where + " must be true or false, got " + json_type(v));
          c.*member = v.get<bool>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) throw Error(where + " must be a number, got " + json_type(v));
          check_range(f, v.get<double>(), false, where, v.dump());
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
          // A uint64_t field (the seed) takes any value its type holds.
          if constexpr (std::is_signed_v<T>)
            check_range(f, double(v.get<T>()), true, where, v.dump());
          c.*member = v.get<T>();
        }
      },
      f.member);
}

// The resume_history array of a config.json, every entry checked for its kind.
std::vector<ResumeChange> parse_resume_history(const json& v, const std::string& source) {
  const std::string where = source + ": key 'resume_history'";
  if (!v.is_array()) throw Error(where + " must be an array, got " + json_type(v));
  std::vector<ResumeChange> history;
  for (const json& entry : v) {
    if (!entry.is_object() || !entry.contains("step") || !entry["step"].is_number_unsigned() ||
        !entry.contains("key") || !entry["key"].is_string() || !entry.contains("before") ||
        !entry["before"].is_primitive() || !entry.contains("after") ||
        !entry["after"].is_primitive())
      throw Error(where +
                  " must hold objects {\"step\", \"key\", \"before\", \"after\"} of plain values");
    if (entry["step"].get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      throw Error(where + ": a step is out of range");
    history.push_back({entry["step"].get<int64_t>(), entry["key"].get<std::string>(),
                       entry["before"].dump(), entry["after"].dump()});
  }
  return history;
}

}  // namespace

void apply_config_json(Config& config, const json& j, const std::string& source) {
  if (!j.is_object())
    throw Error(source + ": a config must be a JSON object, got " + j.type_name());
  for (const auto& [key, value] : j.items()) {
    if (key == "resume_history")
      config.resume_history = parse_resume_history(value, source);
    else
      set_field(config, find_field(key, source), value, source);
  }
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

Config load_config(const std::string& path, const Config& base) {
  return parse_config(read_file(path, "--config"), path, base);
}

Config parse_config(std::string_view text, const std::string& source, const Config& base) {
  const json j = nn::parse_json_text(text, source);
  Config config = base;
  apply_config_json(config, j, source);
  return config;
}

json config_to_json(const Config& config) {
  json j = json::object();
  for (const auto& f : config_fields())
    std::visit([&](auto member) { j[f.key] = config.*member; }, f.member);
  if (!config.resume_history.empty()) {
    json history = json::array();
    for (const auto& change : config.resume_history)
      history.push_back({{"step", change.step},
                         {"key", change.key},
                         {"before", json::parse(change.before)},
                         {"after", json::parse(change.after)}});
    j["resume_history"] = history;
  }
  return j;
}

std::vector<ConfigChange> config_changes(const Config& before, const Config& after) {
  const json a = config_to_json(before), b = config_to_json(after);
  std::vector<ConfigChange> changes;
  for (const auto& f : config_fields())
    if (a[f.key] != b[f.key]) changes.push_back({f.key, a[f.key].dump(), b[f.key].dump()});
  return changes;
}

void check_resume_changes(const Config& saved, const Config& resumed, const std::string& run_dir) {
  std::string fixed;
  for (const auto& change : config_changes(saved, resumed)) {
    if (find_field(change.key, "--resume").on_resume == OnResume::may_change) continue;
    fixed += (fixed.empty() ? "" : ", ") + change.key + " (" + change.before + " -> " +
             change.after + ")";
  }
  if (!fixed.empty())
    throw Error("--resume: cannot change " + fixed + " of the run in " + run_dir +
                ": they fix the model's shape, its data or the order of its batches; only "
                "schedule-like options (steps, lr, eval_every, patience, ...) may change");
}

void save_config(const Config& config, const std::string& path) {
  write_file_atomic(path, config_to_json(config).dump(2) + "\n");
}

bool is_device_name(const std::string& name) {
  if (name == "cpu" || name == "cuda") return true;
  if (name.rfind("cuda:", 0) != 0) return false;
  const std::string number = name.substr(5);
  return !number.empty() && number.size() <= 4 &&
         number.find_first_not_of("0123456789") == std::string::npos;
}

void validate_config(const Config& c, const std::string& source) {
  auto require = [&](bool ok, const std::string& key, const std::string& why) {
    if (!ok) throw Error(source + ": key '" + key + "' " + why);
  };
  // A Config filled in by code (not through set_field) gets the same range checks.
  for (const auto& f : config_fields())
    std::visit(
        [&](auto member) {
          using T = std::remove_cvref_t<decltype(c.*member)>;
          if constexpr (std::is_same_v<T, int64_t>)
            check_range(f, double(c.*member), true, source + ": key '" + f.key + "'",
                        std::to_string(c.*member));
          else if constexpr (std::is_same_v<T, double>)
            check_range(f, c.*member, false, source + ": key '" + f.key + "'",
                        json(c.*member).dump());
        },
        f.member);
  if (c.steps > 0 && c.epochs > 0)
    throw Error(source + ": keys 'steps' (" + std::to_string(c.steps) + ") and 'epochs' (" +
                std::to_string(c.epochs) +
                ") are both set: give one of them (a resumed run's config.json holds its steps: "
                "extend it with --steps)");
  require(c.d_model % c.heads == 0, "heads",
          "must divide d_model (" + std::to_string(c.d_model) + " is not divisible by " +
              std::to_string(c.heads) + ")");
  require(c.min_length <= c.max_length, "min_length",
          "must not exceed max_length (" + std::to_string(c.min_length) + " > " +
              std::to_string(c.max_length) + ")");
  require(!c.channels.empty() && c.channels.find_first_not_of("0123456789, ") == std::string::npos,
          "channels",
          "must be a comma-separated list of widths such as 16,32, got \"" + c.channels + "\"");
  const bool language_model = task_definition(c.task).kind == TaskKind::language_model;
  require(c.tokenizer != "bpe" || language_model, "tokenizer",
          "bpe is the language model's tokenizer (qkv train lm); task '" + c.task +
              "' takes char or whitespace");
  require(c.tokenizer != to_string(TokenizerKind::whitespace) || !language_model, "tokenizer",
          "must be char or bpe for a language model, got \"whitespace\"");
  require(!language_model || c.positional == "learned" || c.positional == "rope", "positional",
          "must be learned or rope for a language model, got \"" + c.positional + "\"");
  require(is_device_name(c.device), "device",
          "must be cpu, cuda or cuda:N (N a device number), got \"" + c.device + "\"");
}

}  // namespace qkv::train
