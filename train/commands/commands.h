// The qkv subcommands. command_table.cpp declares their options and calls these; each returns
// the process exit code and reports problems by throwing qkv::Error (main prints it on one line).
#pragma once

#include <string>
#include <vector>

namespace qkv::cli {

struct GradcheckOptions {
  bool json = false;   // one JSON object per op per line
  std::string filter;  // only ops whose name contains this
};
int gradcheck_command(const GradcheckOptions& options);

int info_command();

struct OpsBenchOptions {
  bool json = false;  // the thread count is the global --threads
};
int bench_ops_command(const OpsBenchOptions& options);

struct DemoOptions {
  int steps = 600;
  uint64_t seed = 1;
};
int demo_command(const DemoOptions& options);

struct TranslateOptions {
  std::string run;
  std::vector<std::string> texts;
  int64_t beam = 1;
  std::string device = "cpu";
  bool last = false;  // the last checkpoint's weights, not best.safetensors
};
int translate_command(const TranslateOptions& options);

struct EvalOptions {
  std::string run;
  std::string data{};  // a language-model run: the text to score (default: its validation split)
  int64_t beam = 1;
  bool int8 = false;  // use the run's model.int8.safetensors (made by qkv quantize)
  std::string device = "cpu";
  std::string precision = "fp32";  // bf16: products in bfloat16 (engine/autocast.h)
  bool last = false;               // the last checkpoint's weights, not best.safetensors
};
// What `qkv eval` measured: the test split's exact match (translation) or accuracy
// (classification), the weights file it scored, and the line it prints.
struct EvalReport {
  double score = 0;
  std::string weights_file, line;
};
EvalReport evaluate_run(const EvalOptions& options);
// Prints evaluate_run's line, or language_model_eval's for a language-model run.
int eval_command(const EvalOptions& options);

struct AttentionOptions {
  std::string run, text, out = "attention";
  bool last = false;  // the last checkpoint's weights, not best.safetensors
};
int attention_command(const AttentionOptions& options);

// `qkv sample`: text from a language-model run (language_model_commands.cpp).
struct SampleOptions {
  std::string run, prompt = "\n";
  int64_t tokens = 500;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 1;
  bool no_cache = false;  // recompute the whole prefix at every step (the same tokens, slower)
  bool last = false;      // the last checkpoint's weights, not best.safetensors
};
int sample_command(const SampleOptions& options);
// `qkv eval` and `qkv attention` on a language-model run (model.json's architecture "GPT").
int language_model_eval(const EvalOptions& options);
int language_model_attention(const AttentionOptions& options);

struct QuantizeOptions {
  std::string run;
  size_t latency_examples = 200;  // single examples timed for the latency column
  bool last = false;              // quantize the last checkpoint's weights, not best.safetensors
};
int quantize_command(const QuantizeOptions& options);

// Registers the backends and gradcheck cases of every layer linked into this binary.
void initialize_layers();

}  // namespace qkv::cli
