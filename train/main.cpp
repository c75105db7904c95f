// qkv: the command line. Every subcommand lives in train/commands/; this file only builds the
// parser, and turns errors into one line on stderr and a non-zero exit code (2 for usage errors,
// 1 for everything else), never a stack dump.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "engine/error.h"
#include "engine/parallel.h"
#include "train/bench/gemm_bench.h"
#include "train/commands/commands.h"

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
  OpsBenchOptions ops;
  auto* bo = bench->add_subcommand("ops", "softmax, layer_norm, GELU, Adam in GB/s beside a copy");
  bo->add_flag("--json", ops.json, "one JSON object per kernel per line");

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
    if (threads > 0) qkv::set_num_threads(threads);
    initialize_layers();
    if (gc->parsed()) return gradcheck_command(gradcheck);
    if (app.got_subcommand("info")) return info_command();
    if (bg->parsed()) {
      if (threads > 0) gemm.threads = {threads};
      return qkv::bench::run_gemm_bench(gemm);
    }
    if (bo->parsed()) return bench_ops_command(ops);
    if (dm->parsed()) return demo_command(demo);
  } catch (const qkv::Error& e) {
    std::fprintf(stderr, "qkv: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
