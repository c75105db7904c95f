#include "train/commands/command_table.h"

#include <memory>

#include "train/bench/attention_bench.h"
#include "train/bench/fma_peak.h"
#include "train/bench/gemm_bench.h"
#include "train/commands/commands.h"
#include "train/trainer/run_choices.h"

namespace qkv::cli {

CLI::Option* add_run_option(CLI::App& app, std::string& run) {
  return app.add_option("--run", run, "run folder")->required()->type_name("DIR");
}

CLI::Option* add_device_option(CLI::App& app, std::string& device, const std::string& help) {
  return app.add_option("--device", device, help)->capture_default_str()->type_name("DEVICE");
}

CLI::Option* add_json_flag(CLI::App& app, bool& json, const std::string& help) {
  return app.add_flag("--json", json, help);
}

CLI::Option* add_beam_option(CLI::App& app, int64_t& beam) {
  return app.add_option("--beam", beam, "beam width (1 = greedy)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
}

CLI::Option* add_last_flag(CLI::App& app, bool& last) {
  return app.add_flag("--last", last,
                      "use the last checkpoint (model.safetensors), not the best validation model "
                      "(best.safetensors)");
}

namespace {

// A command's options live as long as its Runner, which shares them.
template <class Options>
std::shared_ptr<Options> options_of() {
  return std::make_shared<Options>();
}

Runner gradcheck(CLI::App& app) {
  auto o = options_of<GradcheckOptions>();
  add_json_flag(app, o->json, "one JSON object per op per line");
  app.add_option("--filter", o->filter, "only ops whose name contains this");
  return [o](const GlobalOptions&) { return gradcheck_command(*o); };
}

Runner info(CLI::App&) {
  return [](const GlobalOptions&) { return info_command(); };
}

Runner bench_gemm(CLI::App& app) {
  auto o = options_of<bench::GemmBenchOptions>();
  add_json_flag(app, o->json, "one JSON object per measurement per line");
  app.add_flag("--quick", o->quick, "fewer shapes, shorter timing");
  add_device_option(app, o->device, "cpu (beside OpenBLAS) or cuda (beside cuBLAS)");
  return [o](const GlobalOptions& global) {
    if (global.threads > 0) o->threads = {global.threads};
    return bench::run_gemm_bench(*o);
  };
}

Runner bench_attention(CLI::App& app) {
  auto o = options_of<bench::AttentionBenchOptions>();
  add_json_flag(app, o->json, "one JSON object per variant and length");
  app.add_option("--max-t", o->max_t, "longest sequence (64, 128, ... up to it)")
      ->capture_default_str()
      ->check(CLI::Range(64, 65536));
  app.add_option("--plot", o->plot, "PNG of time and memory against T (\"\" = none)")
      ->capture_default_str();
  add_device_option(app, o->device,
                    "cpu, or cuda (flash attention forward and backward, T = 1024 ... 8192)");
  return [o](const GlobalOptions&) { return bench::run_attention_bench(*o); };
}

Runner bench_decode(CLI::App& app) {
  auto o = options_of<bench::DecodeBenchOptions>();
  add_json_flag(app, o->json, "one JSON object per measurement");
  return [o](const GlobalOptions&) { return bench::run_decode_bench(*o); };
}

Runner bench_peak(CLI::App& app) {
  auto o = options_of<bench::PeakBenchOptions>();
  add_json_flag(app, o->json, "one JSON object per width and thread count");
  return [o](const GlobalOptions& global) {
    if (global.threads > 0) o->threads = {global.threads};
    return bench::run_peak_bench(*o);
  };
}

Runner bench_ops(CLI::App& app) {
  auto o = options_of<OpsBenchOptions>();
  add_json_flag(app, o->json, "one JSON object per kernel per line");
  return [o](const GlobalOptions&) { return bench_ops_command(*o); };
}

Runner translate(CLI::App& app) {
  auto o = options_of<TranslateOptions>();
  add_run_option(app, o->run);
  add_beam_option(app, o->beam);
  app.add_option("text", o->texts, "text(s) to translate")->required();
  add_device_option(app, o->device, "cpu, cuda or cuda:N");
  add_last_flag(app, o->last);
  return [o](const GlobalOptions&) { return translate_command(*o); };
}

Runner eval(CLI::App& app) {
  auto o = options_of<EvalOptions>();
  add_run_option(app, o->run);
  app.add_option("--data", o->data,
                 "language-model run: the text to score (default: its validation split)")
      ->type_name("FILE");
  add_beam_option(app, o->beam);
  app.add_flag("--int8", o->int8, "evaluate the run's int8 model (made by qkv quantize)");
  add_device_option(app, o->device, "cpu, cuda or cuda:N");
  app.add_option("--precision", o->precision, "products in fp32 or bf16 (mixed precision)")
      ->capture_default_str()
      ->check(CLI::IsMember(train::precision_names()));
  add_last_flag(app, o->last);
  return [o](const GlobalOptions&) { return eval_command(*o); };
}

Runner quantize(CLI::App& app) {
  auto o = options_of<QuantizeOptions>();
  add_run_option(app, o->run);
  app.add_option("--latency-examples", o->latency_examples, "examples timed one at a time")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  add_last_flag(app, o->last);
  return [o](const GlobalOptions&) { return quantize_command(*o); };
}

Runner attention(CLI::App& app) {
  auto o = options_of<AttentionOptions>();
  add_run_option(app, o->run);
  app.add_option("text", o->text, "input text")->required();
  app.add_option("--out", o->out, "folder for the PNG files")->capture_default_str();
  add_last_flag(app, o->last);
  return [o](const GlobalOptions&) { return attention_command(*o); };
}

Runner sample(CLI::App& app) {
  auto o = options_of<SampleOptions>();
  add_run_option(app, o->run);
  app.add_option("--prompt", o->prompt, "the text to continue")->capture_default_str();
  app.add_option("--tokens", o->tokens, "tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  app.add_option("--temperature", o->temperature, "divides the logits; 0 = greedy")
      ->capture_default_str();
  app.add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = all)")
      ->capture_default_str();
  app.add_option("--top-p", o->top_p, "keep the most likely tokens summing to p (nucleus)")
      ->capture_default_str();
  app.add_option("--seed", o->seed, "random seed of the draws")->capture_default_str();
  app.add_flag("--no-cache", o->no_cache,
               "recompute the whole prefix at every step instead of using the KV cache (the same "
               "tokens, slower)");
  add_last_flag(app, o->last);
  return [o](const GlobalOptions&) { return sample_command(*o); };
}

Runner demo(CLI::App& app) {
  auto o = options_of<DemoOptions>();
  app.add_option("--steps", o->steps, "optimizer steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--seed", o->seed, "random seed")->capture_default_str();
  return [o](const GlobalOptions&) { return demo_command(*o); };
}

}  // namespace

Command leaf(std::string name, std::string help, Runner (*add_options)(CLI::App&)) {
  return {std::move(name), std::move(help), add_options, {}};
}

Command group(std::string name, std::string help, std::vector<Command> subcommands) {
  return {std::move(name), std::move(help), nullptr, std::move(subcommands)};
}

const std::vector<Command>& command_table() {
  static const std::vector<Command> table = {
      leaf("gradcheck", "check every op's gradient against finite differences (float64)",
           gradcheck),
      leaf("info", "version, build, threads, CPU features, CUDA status", info),
      group(
          "bench", "benchmarks against references measured in the same run",
          {
              leaf("gemm", "GEMM GFLOP/s beside OpenBLAS", bench_gemm),
              leaf("attention",
                   "attention variants (naive, chunked, local, sparse): time and peak memory by T",
                   bench_attention),
              leaf("decode", "KV-cache decoding and int8 Linear at batch 1", bench_decode),
              leaf("peak",
                   "the float32 FMA peak per vector width and thread count, measured on registers, "
                   "the memory bandwidth per thread count, and at two threads what one thread "
                   "pays to read the other's writes and each thread's speed alone",
                   bench_peak),
              leaf("ops", "softmax, layer_norm, GELU and its backward, Adam in GB/s beside a copy",
                   bench_ops),
          }),
      train_command_group(),
      leaf("translate", "translate text with a trained run", translate),
      leaf("eval", "test metrics of a trained run (a language model: loss and bits per character)",
           eval),
      leaf("sample", "text from a language-model run (qkv train lm), continuing --prompt", sample),
      leaf("quantize", "int8-quantize a run's Linear layers; accuracy and speed before and after",
           quantize),
      leaf("attention",
           "attention pictures (PNG) of a trained run for one input: a text, or a test image index",
           attention),
      leaf("demo", "train a small MLP on two spirals for a few seconds", demo),
  };
  return table;
}

std::vector<std::pair<CLI::App*, Runner>> add_commands(CLI::App& parent,
                                                       const std::vector<Command>& table) {
  std::vector<std::pair<CLI::App*, Runner>> runners;
  for (const Command& command : table) {
    CLI::App* app = parent.add_subcommand(command.name, command.help);
    if (command.subcommands.empty()) {
      runners.emplace_back(app, command.add_options(*app));
      continue;
    }
    app->require_subcommand(1);
    for (auto& runner : add_commands(*app, command.subcommands)) runners.push_back(runner);
  }
  return runners;
}

}  // namespace qkv::cli
