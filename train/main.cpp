// qkv: the command line. Every subcommand lives in train/commands/; this file only builds the
// parser, and turns errors into one line on stderr and a non-zero exit code (2 for usage errors,
// 1 for everything else), never a stack dump.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <variant>

#include "engine/error.h"
#include "engine/parallel.h"
#include "train/bench/attention_bench.h"
#include "train/bench/fma_peak.h"
#include "train/bench/gemm_bench.h"
#include "train/commands/commands.h"
#include "train/config.h"
#include "train/trainer/classification_trainer.h"
#include "train/trainer/training_common.h"
#include "train/trainer/translation_trainer.h"

namespace {

// The flags of one `qkv train` subcommand: a string per Config field (parsed by set_config_value,
// so the config's own checks and messages apply), --config and --resume.
struct TrainFlags {
  std::map<std::string, std::string> values;
  std::vector<std::pair<std::string, CLI::Option*>> options;
  std::string config_path, resume_dir;
  bool overwrite = false;
  qkv::train::RunMode mode() const {
    return !resume_dir.empty() ? qkv::train::RunMode::resume
           : overwrite         ? qkv::train::RunMode::overwrite
                               : qkv::train::RunMode::fresh;
  }
};

CLI::App* add_train_command(CLI::App& train, const std::string& name,
                            const std::string& description, TrainFlags& flags) {
  auto* cmd = train.add_subcommand(name, description);
  for (const auto& field : qkv::train::config_fields()) {
    if (field.key == "threads") continue;  // the global --threads
    std::string dashed = field.key;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    std::string names = "--" + dashed + (dashed != field.key ? ",--" + field.key : "");
    std::string help = field.help;
    if (std::holds_alternative<int64_t qkv::train::Config::*>(field.member))
      help += " [" + field.range.describe(true) + "]";
    if (std::holds_alternative<double qkv::train::Config::*>(field.member))
      help += " " + field.range.describe(false);
    if (!field.choices.empty()) {
      help += " (";
      for (size_t i = 0; i < field.choices.size(); ++i)
        help += (i ? ", " : "") + (field.choices[i].empty() ? "\"\"" : field.choices[i]);
      help += ")";
    }
    flags.options.emplace_back(field.key, cmd->add_option(names, flags.values[field.key], help));
  }
  cmd->add_option("--config", flags.config_path, "JSON file of options (flags override it)");
  auto* resume = cmd->add_option("--resume", flags.resume_dir, "continue the run in this folder");
  cmd->add_flag("--overwrite", flags.overwrite,
                "replace the run already in --out (its checkpoint, metrics, log and pictures)")
      ->excludes(resume);
  return cmd;
}

// The run's config: the resumed run's config.json, else --config, else the defaults (with the
// subcommand's own default task); then the flags given on the command line over it.
qkv::train::Config config_from_flags(TrainFlags& flags, int threads,
                                     const std::string& default_task) {
  qkv::train::Config config;
  config.task = default_task;
  if (!flags.resume_dir.empty()) {
    // load_config's own message would blame --config, which the user did not give.
    const std::string path = flags.resume_dir + "/config.json";
    QKV_CHECK(std::filesystem::exists(path), "--resume", flags.resume_dir,
              " is not a run folder (it has no config.json)");
    config = qkv::train::load_config(path);
  }
  if (!flags.config_path.empty()) config = qkv::train::load_config(flags.config_path);
  for (const auto& [key, option] : flags.options)
    if (option->count() > 0)
      qkv::train::set_config_value(config, key, flags.values[key], "--" + key);
  if (!flags.resume_dir.empty()) config.out = flags.resume_dir;
  if (threads > 0) config.threads = threads;
  qkv::train::install_interrupt_handler();
  return config;
}

// A run stopped by a signal says so in one line and exits with 128 + the signal, as a process
// killed by it would (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP).
int exit_code(const qkv::train::TrainResult& result, const qkv::train::Config& config) {
  if (!result.interrupted) return 0;
  std::fprintf(stderr, "qkv: %s\n",
               qkv::train::interruption_message(result.steps, config.out).c_str());
  return 128 + qkv::train::interrupt_signal();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qkv::cli;
  CLI::App app{"qkv: a deep-learning stack written from scratch, for study and toy models"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads,
                 "CPU threads for kernels (default: QKV_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 1024));

  GradcheckOptions gradcheck;
  auto* gc = app.add_subcommand("gradcheck",
                                "check every op's gradient against finite differences (float64)");
  gc->add_flag("--json", gradcheck.json, "one JSON object per op per line");
  gc->add_option("--filter", gradcheck.filter, "only ops whose name contains this");

  app.add_subcommand("info", "version, build, threads, CPU features, CUDA status");

  auto* bench =
      app.add_subcommand("bench", "benchmarks against references measured in the same run");
  bench->require_subcommand(1);
  qkv::bench::GemmBenchOptions gemm;
  auto* bg = bench->add_subcommand("gemm", "GEMM GFLOP/s beside OpenBLAS");
  bg->add_flag("--json", gemm.json, "one JSON object per measurement per line");
  bg->add_flag("--quick", gemm.quick, "fewer shapes, shorter timing");
  bg->add_option("--device", gemm.device, "cpu (beside OpenBLAS) or cuda (beside cuBLAS)");
  qkv::bench::AttentionBenchOptions attention_bench;
  auto* ba = bench->add_subcommand(
      "attention", "attention variants (naive, chunked, local, sparse): time and peak memory by T");
  ba->add_flag("--json", attention_bench.json, "one JSON object per variant and length");
  ba->add_option("--max-t", attention_bench.max_t, "longest sequence (64, 128, ... up to it)")
      ->check(CLI::Range(64, 65536));
  ba->add_option("--plot", attention_bench.plot, "PNG of time and memory against T (\"\" = none)");
  ba->add_option("--device", attention_bench.device,
                 "cpu, or cuda (flash attention forward and backward, T = 1024 ... 8192)");
  qkv::bench::DecodeBenchOptions decode_bench;
  auto* bd = bench->add_subcommand("decode", "KV-cache decoding and int8 Linear at batch 1");
  bd->add_flag("--json", decode_bench.json, "one JSON object per measurement");
  qkv::bench::PeakBenchOptions peak;
  auto* bp = bench->add_subcommand(
      "peak", "the float32 FMA peak per vector width and thread count, measured on registers");
  bp->add_flag("--json", peak.json, "one JSON object per width and thread count");
  OpsBenchOptions ops;
  auto* bo = bench->add_subcommand("ops", "softmax, layer_norm, GELU, Adam in GB/s beside a copy");
  bo->add_flag("--json", ops.json, "one JSON object per kernel per line");

  // qkv train translate / classify: one flag per Config field (--batch-size or --batch_size), a
  // --config file underneath them, and --resume to continue a run folder.
  auto* train_cmd = app.add_subcommand("train", "train a model");
  train_cmd->require_subcommand(1);
  TrainFlags translate_flags, classify_flags;
  auto* translate_train = add_train_command(
      *train_cmd, "translate", "train a Seq2SeqTransformer on a translation task", translate_flags);
  auto* classify_train = add_train_command(
      *train_cmd, "classify",
      "train a classifier: order/classify (transformer), fashion-mnist (CNN or ViT)",
      classify_flags);

  TranslateOptions translate;
  auto* tr = app.add_subcommand("translate", "translate text with a trained run");
  tr->add_option("--run", translate.run, "run folder")->required();
  tr->add_option("--beam", translate.beam, "beam width (1 = greedy)")->check(CLI::Range(1, 64));
  tr->add_option("text", translate.texts, "text(s) to translate")->required();
  tr->add_option("--device", translate.device, "cpu, cuda or cuda:N");
  EvalOptions eval;
  auto* ev = app.add_subcommand("eval", "test metrics of a trained run");
  ev->add_option("--run", eval.run, "run folder")->required();
  ev->add_option("--beam", eval.beam, "beam width (1 = greedy)")->check(CLI::Range(1, 64));
  ev->add_flag("--int8", eval.int8, "evaluate the run's int8 model (made by qkv quantize)");
  ev->add_option("--device", eval.device, "cpu, cuda or cuda:N");
  ev->add_option("--precision", eval.precision, "products in fp32 or bf16 (mixed precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  QuantizeOptions quantize;
  auto* qz = app.add_subcommand(
      "quantize", "int8-quantize a run's Linear layers; accuracy and speed before and after");
  qz->add_option("--run", quantize.run, "run folder")->required();
  qz->add_option("--latency-examples", quantize.latency_examples, "examples timed one at a time")
      ->check(CLI::Range(1, 100000));
  AttentionOptions attention;
  auto* at = app.add_subcommand(
      "attention",
      "attention pictures (PNG) of a trained run for one input: a text, or a test image index");
  at->add_option("--run", attention.run, "run folder")->required();
  at->add_option("text", attention.text, "input text")->required();
  at->add_option("--out", attention.out, "folder for the PNG files");

  DemoOptions demo;
  auto* dm = app.add_subcommand("demo", "train a small MLP on two spirals for a few seconds");
  dm->add_option("--steps", demo.steps, "optimizer steps")->check(CLI::Range(1, 1000000));
  dm->add_option("--seed", demo.seed, "random seed");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "qkv: %s (see qkv --help)\n", e.what());
    return 2;
  }

  try {
    qkv::num_threads();  // a bad QKV_NUM_THREADS is refused here, before any work
    if (threads > 0) qkv::set_num_threads(threads);
    initialize_layers();
    if (gc->parsed()) return gradcheck_command(gradcheck);
    if (app.got_subcommand("info")) return info_command();
    if (bg->parsed()) {
      if (threads > 0) gemm.threads = {threads};
      return qkv::bench::run_gemm_bench(gemm);
    }
    if (bp->parsed()) {
      if (threads > 0) peak.threads = {threads};
      return qkv::bench::run_peak_bench(peak);
    }
    if (bo->parsed()) return bench_ops_command(ops);
    if (ba->parsed()) return qkv::bench::run_attention_bench(attention_bench);
    if (bd->parsed()) return qkv::bench::run_decode_bench(decode_bench);
    if (dm->parsed()) return demo_command(demo);
    if (translate_train->parsed()) {
      qkv::train::Config config = config_from_flags(translate_flags, threads, "dates");
      return exit_code(qkv::train::train_translation(config, translate_flags.mode()), config);
    }
    if (classify_train->parsed()) {
      qkv::train::Config config = config_from_flags(classify_flags, threads, "order");
      return exit_code(qkv::train::train_classification(config, classify_flags.mode()), config);
    }
    if (tr->parsed()) return translate_command(translate);
    if (ev->parsed()) return eval_command(eval);
    if (qz->parsed()) return quantize_command(quantize);
    if (at->parsed()) return attention_command(attention);
  } catch (const qkv::Error& e) {
    std::fprintf(stderr, "qkv: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
