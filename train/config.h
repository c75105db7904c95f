// The run configuration: every option of the trainer in one struct, loadable from JSON.
//
// `qkv train --config run.json` reads a JSON object whose keys are the field names below; flags on
// the command line override it, and the effective configuration is written into the run folder as
// config.json, so a run folder always says exactly how it was made. A mistyped key is an error that
// names the closest valid key, because a silently ignored "learning_rate" (for "lr") would waste a
// whole run.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "train/did_you_mean.h"

namespace qkv::train {

// One option that `--resume` gave another value: the step the run had reached, the key, and the
// value before and after as JSON text.
struct ResumeChange {
  int64_t step = 0;
  std::string key, before, after;
};

struct Config {
  // ---- data
  std::string task =
      "dates";       // copy, reverse, sort, dates, numbers, order, pairs, classify, fashion-mnist
  std::string data;  // pairs.tsv / labels.tsv, or the IDX folder of fashion-mnist (empty: default)
  std::string tokenizer;      // "char", "whitespace" or (lm) "bpe"; empty = the task's natural one
  int64_t min_frequency = 1;  // rarer tokens become <unk>
  // valid_size / test_size 0: a share of a user's corpus, or 1000 of a generated task
  // (train/scaled_defaults.h).
  int64_t train_size = 20000, valid_size = 0, test_size = 0;
  // Lengths of the examples a task generates (symbol tasks and the order task), in symbols.
  int64_t min_length = 3, max_length = 12;
  // Not a task length: the most tokens of a sequence a batch keeps (the rest is cut off), and so
  // the text classifier's positions.
  int64_t max_len = 128;
  // ---- language model (task lm): the last valid_fraction of --data is the validation text;
  // valid_size is then the number of validation windows of `context` tokens each evaluation reads
  int64_t context = 64;
  double valid_fraction = 0.1;
  int64_t vocab_size = 512;  // --tokenizer bpe: at most this many token ids
  // ---- model
  int64_t d_model = 128, heads = 4, layers = 2, ff_dim = 512;
  double dropout = 0.1;
  std::string positional = "sinusoidal";  // sinusoidal, learned, relative, rope, alibi
  // ---- classifiers (text tasks always use a TransformerClassifier)
  std::string model = "cnn";       // image classifier: cnn, vit
  std::string attention = "none";  // CNN blocks' attention: none, se, cbam
  std::string channels = "16,32";  // CNN: one residual block per entry (width)
  int64_t patch_size = 7;          // ViT: square patches, must divide 28
  std::string pooling = "cls";     // text classifier: cls, mean
  // ---- optimization
  std::string optimizer = "adamw";  // adamw, sgd
  // steps and epochs both 0: a number of epochs scaled to the data (train/scaled_defaults.h);
  // a run sets at most one of them.
  int64_t batch_size = 64, steps = 0, epochs = 0;
  double lr = 1e-3, weight_decay = 0.01, beta1 = 0.9, beta2 = 0.98;
  int64_t warmup = 200;
  std::string schedule = "cosine";  // constant, linear, cosine, noam
  double clip = 1.0;                // max gradient norm; 0 = off
  double label_smoothing = 0.0;
  bool bucket_by_length = true;
  // micro-batches of each global batch (gradients accumulated, one optimizer step); under
  // `mpirun -np N` each rank takes N-th of the batch and accumulates its share
  int64_t accumulate = 1;
  std::string dp_overlap = "on";  // on: reduce gradients during backward; off: after it
  // ---- evaluation, early stop, checkpoints
  int64_t eval_every = 250, log_every = 50, checkpoint_every = 1000;
  int64_t beam = 1;           // 1 = greedy decoding
  std::string target_metric;  // "" = the task's main one: exact_match (translation), accuracy
  double target_value = 0.0;  // stop once the metric reaches it; 0 = never
  int64_t patience = 0;       // stop after this many evals without improvement; 0 = never
  bool last = false;  // test the last weights, not the best validation model (best.safetensors)
  // ---- machine
  uint64_t seed = 1;
  int64_t threads = 0;             // 0 = all cores
  std::string device = "cpu";      // cpu, cuda, cuda:N
  std::string precision = "fp32";  // fp32, bf16 (CUDA)
  std::string out = "runs/run";
  bool pictures = true;
  bool trace = false;   // print attention statistics of the first batch (docs/TRAINING.md)
  int64_t profile = 0;  // profile this many steps after the warm-up ones (docs/CPU_KERNELS.md)
  int64_t profile_warmup = 2;           // unprofiled steps before them
  bool checkpoint_activations = false;  // gradient checkpointing of the transformer layers
  // ---- written by --resume (config.json's "resume_history"; not an option)
  std::vector<ResumeChange> resume_history;
};

// The values a numeric field may take: low..high, either end open or closed. Every numeric field
// has one, checked for flags, config files and resumed config.json alike.
struct Range {
  double low = 0, high = 0;
  bool low_open = false, high_open = false;
  bool contains(double v) const {
    return (low_open ? v > low : v >= low) && (high_open ? v < high : v <= high);
  }
  // "1..1024" for integers, "[0, 1)" for real numbers.
  std::string describe(bool integer) const;
};

// Whether `--resume` may give a field another value than the run was started with. The others fix
// the model's shape, the data or the order of the batches, which the checkpoint depends on.
enum class OnResume { fixed, may_change };

// One row per Config field: its JSON key, where it lives, and what it means.
struct ConfigField {
  std::string key;
  std::variant<std::string Config::*, int64_t Config::*, uint64_t Config::*, double Config::*,
               bool Config::*>
      member;
  std::vector<std::string> choices;  // allowed values of a string field (empty: any)
  std::string help;
  Range range{};  // numeric fields only
  OnResume on_resume = OnResume::fixed;
};
const std::vector<ConfigField>& config_fields();

// Sets the fields named in `j` (a JSON object), leaving the others as they are. `source` (a file
// name) starts every error message: "run.json: unknown key 'learning_rate' (did you mean 'lr'?)",
// "run.json: key 'steps' must be an integer, got \"1000\"".
void apply_config_json(Config& config, const nlohmann::json& j, const std::string& source);
// Sets one field from a string, as the command line gives it ("--steps 500"): parsed as JSON when
// possible, else taken as a string.
void set_config_value(Config& config, const std::string& key, const std::string& value,
                      const std::string& source = "command line");

// `base` (the defaults) overridden by the file's keys. Throws qkv::Error naming the file when it is
// missing, not JSON, not an object, or has a bad key or value.
Config load_config(const std::string& path, const Config& base = {});
// The same on the file's text; `source` (the file name) starts every error.
Config parse_config(std::string_view text, const std::string& source, const Config& base = {});
nlohmann::json config_to_json(const Config& config);
// Writes the effective config as pretty JSON, atomically.
void save_config(const Config& config, const std::string& path);

// A field whose value differs between two configs: its key and both values as JSON text.
struct ConfigChange {
  std::string key, before, after;
};
std::vector<ConfigChange> config_changes(const Config& before, const Config& after);
// The config a resumed run goes on with: `resumed` (the run's config.json with the flags over it)
// may differ from `saved` only in fields that may change on resume; otherwise throws qkv::Error
// naming every fixed field that changed and both its values.
void check_resume_changes(const Config& saved, const Config& resumed, const std::string& run_dir);

// Each numeric field in its range, then the cross-field checks (heads divides d_model, min_length
// <= max_length, ...); throws qkv::Error naming the key.
void validate_config(const Config& config, const std::string& source = "config");

// "cpu", "cuda" or "cuda:N" with N a number of at most four digits ("cuda:", "cuda:1x" are not).
bool is_device_name(const std::string& name);

// The valid key closest to `key` (for "did you mean"; edit_distance is in did_you_mean.h).
std::string closest_config_key(const std::string& key);

}  // namespace qkv::train
