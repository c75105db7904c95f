// `qkv train translate`, `qkv train classify` and `qkv train lm`: one typed option per Config field
// that the subcommand's models read (--batch-size or --batch_size), a --config file underneath
// them, and
// --resume to continue a run folder. Each value is checked by the config's own rules while the
// command line is parsed, so a bad one is a usage error naming the flag.
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <variant>

#include "engine/error.h"
#include "train/commands/command_table.h"
#include "train/config.h"
#include "train/did_you_mean.h"
#include "train/tasks/task_table.h"
#include "train/trainer/classification_trainer.h"
#include "train/trainer/interrupt.h"
#include "train/trainer/language_model_trainer.h"
#include "train/trainer/translation_trainer.h"

namespace qkv::cli {

namespace {

using train::Config;
using train::ConfigField;

// The `qkv train` subcommands: each has a flag for the fields its models read.
enum class Trainer { translate, classify, lm };

bool listed(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// The fields only a classifier reads: `qkv train translate` has no flag for them.
bool classifier_only(const std::string& key) {
  return listed({"model", "attention", "channels", "patch_size", "pooling"}, key);
}

// The fields only the language model reads.
bool language_model_only(const std::string& key) {
  return listed({"context", "valid_fraction", "vocab_size"}, key);
}

// The fields `qkv train lm` reads: one text file and a GPT (no generated tasks, test split or
// decoding; early stopping on the validation loss, its one metric).
bool language_model_reads(const std::string& key) {
  return language_model_only(key) || listed({"data",       "tokenizer",    "valid_size",
                                             "d_model",    "heads",        "layers",
                                             "ff_dim",     "dropout",      "positional",
                                             "optimizer",  "batch_size",   "steps",
                                             "lr",         "weight_decay", "beta1",
                                             "beta2",      "warmup",       "schedule",
                                             "clip",       "accumulate",   "dp_overlap",
                                             "eval_every", "log_every",    "checkpoint_every",
                                             "seed",       "device",       "precision",
                                             "out",        "pictures",     "target_value",
                                             "patience",   "profile",      "profile_warmup"},
                                            key);
}

bool has_flag(Trainer trainer, const std::string& key) {
  if (key == "threads") return false;  // the global --threads
  switch (trainer) {
    case Trainer::translate:
      return !classifier_only(key) && !language_model_only(key);
    case Trainer::classify:
      return !language_model_only(key);
    case Trainer::lm:
      return language_model_reads(key);
  }
  return false;
}

// The choices of a field on one subcommand, where they are fewer than the config allows.
std::vector<std::string> choices_of(Trainer trainer, const ConfigField& field) {
  if (field.key == "task")
    return trainer == Trainer::classify ? train::classification_task_names()
                                        : train::translation_task_names();
  if (field.key == "tokenizer")
    return trainer == Trainer::lm ? std::vector<std::string>{"", "char", "bpe"}
                                  : std::vector<std::string>{"", "char", "whitespace"};
  if (field.key == "positional" && trainer == Trainer::lm) return {"learned", "rope"};
  return field.choices;
}

// The help of a field whose meaning is the language model's own.
std::string help_of(Trainer trainer, const ConfigField& field) {
  if (trainer == Trainer::lm && field.key == "valid_size")
    return "validation windows (of --context tokens) per evaluation";
  if (trainer == Trainer::lm && field.key == "data") return "the UTF-8 text file to model";
  if (trainer == Trainer::lm && field.key == "layers") return "transformer blocks";
  if (trainer == Trainer::lm && field.key == "batch_size") return "windows per step";
  if (trainer == Trainer::lm && field.key == "pictures") return "draw loss.png";
  if (trainer == Trainer::lm && field.key == "tokenizer")
    return "char (code points; \"\" is char) or bpe (byte-level BPE, --vocab-size)";
  return field.help;
}

struct TrainFlags {
  std::map<std::string, std::string> values;
  std::vector<std::pair<std::string, CLI::Option*>> options;
  std::string config_path, resume_dir;
  bool overwrite = false;
  train::RunMode mode() const {
    return !resume_dir.empty() ? train::RunMode::resume
           : overwrite         ? train::RunMode::overwrite
                               : train::RunMode::fresh;
  }
};

std::string type_name(const ConfigField& field) {
  return std::visit(
      [](auto member) -> std::string {
        using T = std::remove_reference_t<decltype(Config{}.*member)>;
        if constexpr (std::is_same_v<T, std::string>) return "TEXT";
        if constexpr (std::is_same_v<T, bool>) return "BOOL";
        if constexpr (std::is_same_v<T, double>) return "FLOAT";
        if constexpr (std::is_same_v<T, uint64_t>) return "UINT";
        return "INT";
      },
      field.member);
}

// "1..1000000000", "[0, 1)", "{copy,reverse,...}" or "" (any text).
std::string allowed_values(const ConfigField& field, const std::vector<std::string>& choices) {
  if (!choices.empty()) {
    std::string text = "{";
    for (size_t i = 0; i < choices.size(); ++i)
      text += (i ? "," : "") + (choices[i].empty() ? "\"\"" : choices[i]);
    return text + "}";
  }
  if (std::holds_alternative<int64_t Config::*>(field.member)) return field.range.describe(true);
  if (std::holds_alternative<double Config::*>(field.member)) return field.range.describe(false);
  return "";
}

// The value's text as --help shows it: "dates", 0.001, true.
std::string default_text(const Config& defaults, const ConfigField& field) {
  const nlohmann::json value = train::config_to_json(defaults)[field.key];
  if (value.is_string())
    return value.get<std::string>().empty() ? "\"\"" : value.get<std::string>();
  return value.dump();
}

// Checks a flag's value with the config's own rules (and the subcommand's own list of tasks).
CLI::Validator config_check(const ConfigField& field, const std::string& flag,
                            const std::vector<std::string>& choices) {
  const std::string key = field.key;
  return CLI::Validator(
      [key, flag, choices](std::string& value) -> std::string {
        if (!choices.empty() && std::find(choices.begin(), choices.end(), value) == choices.end()) {
          std::string valid;
          for (const auto& c : choices)
            if (!c.empty()) valid += (valid.empty() ? "" : ", ") + c;
          return "must be one of " + valid + ", got \"" + value + "\"" +
                 train::did_you_mean(value, choices);
        }
        try {
          Config scratch;
          train::set_config_value(scratch, key, value, flag);
        } catch (const Error& e) {
          std::string message = e.what();
          if (message.rfind(flag + " ", 0) == 0) message = message.substr(flag.size() + 1);
          return message;
        }
        return "";
      },
      allowed_values(field, choices));
}

void add_train_flags(CLI::App& cmd, TrainFlags& flags, Trainer trainer, const Config& defaults) {
  for (const auto& field : train::config_fields()) {
    if (!has_flag(trainer, field.key)) continue;
    std::string dashed = field.key;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    const std::string flag = "--" + dashed;
    std::string names = flag + (dashed != field.key ? ",--" + field.key : "");
    const std::vector<std::string> choices = choices_of(trainer, field);
    CLI::Option* option = cmd.add_option(names, flags.values[field.key], help_of(trainer, field))
                              ->type_name(type_name(field))
                              ->default_str(default_text(defaults, field))
                              ->check(config_check(field, flag, choices));
    flags.options.emplace_back(field.key, option);
  }
  for (auto& [key, option] : flags.options)  // a run's length is given one way at most
    if (key == "epochs") option->excludes("--steps");
  cmd.add_option("--config", flags.config_path, "JSON file of options (flags override it)")
      ->type_name("FILE");
  auto* resume = cmd.add_option("--resume", flags.resume_dir, "continue the run in this folder")
                     ->type_name("DIR");
  cmd.add_flag("--overwrite", flags.overwrite,
               "replace the run already in --out (its checkpoint, metrics, log and pictures)")
      ->excludes(resume);
}

// The run's config: the resumed run's config.json, else --config over the subcommand's defaults,
// else those defaults; then the flags given on the command line over it.
Config config_from_flags(TrainFlags& flags, int threads, const Config& defaults) {
  Config config = defaults;
  if (!flags.resume_dir.empty()) {
    // load_config's own message would blame --config, which the user did not give.
    const std::string path = flags.resume_dir + "/config.json";
    QKV_CHECK(std::filesystem::exists(path), "--resume", flags.resume_dir,
              " is not a run folder (it has no config.json)");
    config = train::load_config(path);
  }
  if (!flags.config_path.empty()) config = train::load_config(flags.config_path, defaults);
  for (const auto& [key, option] : flags.options) {
    if (option->count() == 0) continue;
    std::string dashed = key;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    train::set_config_value(config, key, flags.values[key], "--" + dashed);
  }
  if (!flags.resume_dir.empty()) config.out = flags.resume_dir;
  if (threads > 0) config.threads = threads;
  return config;
}

// A run stopped by a signal says so in one line and exits with 128 + the signal, as a process
// killed by it would (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP).
int exit_code(const train::TrainResult& result, const Config& config) {
  if (!result.interrupted) return 0;
  std::fprintf(stderr, "qkv: %s\n", train::interruption_message(result.steps, config.out).c_str());
  return 128 + train::interrupt_signal();
}

Config with_task(const std::string& task) {
  Config c;
  c.task = task;
  return c;
}

Runner train_translate(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  add_train_flags(app, *flags, Trainer::translate, with_task("dates"));
  return [flags](const GlobalOptions& global) {
    Config config = config_from_flags(*flags, global.threads, with_task("dates"));
    train::install_interrupt_handler();
    return exit_code(train::train_translation(config, flags->mode()), config);
  };
}

Runner train_classify(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  add_train_flags(app, *flags, Trainer::classify, with_task("order"));
  return [flags](const GlobalOptions& global) {
    Config config = config_from_flags(*flags, global.threads, with_task("order"));
    train::install_interrupt_handler();
    return exit_code(train::train_classification(config, flags->mode()), config);
  };
}

Runner train_lm(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  add_train_flags(app, *flags, Trainer::lm, train::language_model_defaults());
  return [flags](const GlobalOptions& global) {
    Config config = config_from_flags(*flags, global.threads, train::language_model_defaults());
    train::install_interrupt_handler();
    return exit_code(train::train_language_model(config, flags->mode()), config);
  };
}

}  // namespace

Command train_command_group() {
  return group(
      "train", "train a model",
      {
          leaf("translate", "train a Seq2SeqTransformer on a translation task", train_translate),
          leaf("classify",
               "train a classifier: order/classify (transformer), fashion-mnist (CNN or "
               "ViT)",
               train_classify),
          leaf("lm", "train a GPT language model on a UTF-8 text file (--data)", train_lm),
      });
}

}  // namespace qkv::cli
