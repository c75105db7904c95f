// qkv: the command line. Every subcommand is a row of the command table (train/commands/); this
// file only builds the parser from it, and turns errors into one line on stderr and a non-zero
// exit code (2 for usage errors, 1 for everything else), never a stack dump.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "engine/error.h"
#include "engine/parallel.h"
#include "train/commands/command_table.h"
#include "train/commands/commands.h"

int main(int argc, char** argv) {
  using namespace qkv::cli;
  CLI::App app{"qkv: a deep-learning stack written from scratch, for study and toy models"};
  app.require_subcommand(1);
  // Subcommands inherit this: an option they do not know (--threads) goes to the command above.
  app.fallthrough();
  GlobalOptions global;
  app.add_option("--threads", global.threads,
                 "CPU threads for kernels (default: QKV_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 1024));
  const auto runners = add_commands(app, command_table());

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string unknown = unknown_name_message(app, {argv + 1, argv + argc});
    std::fprintf(stderr, "qkv: %s (see qkv --help)\n",
                 unknown.empty() ? e.what() : unknown.c_str());
    return 2;
  }

  try {
    qkv::num_threads();  // a bad QKV_NUM_THREADS is refused here, before any work
    if (global.threads > 0) qkv::set_num_threads(global.threads);
    initialize_layers();
    for (const auto& [command, run] : runners)
      if (command->parsed()) return run(global);
  } catch (const std::exception& e) {  // qkv::Error and the standard library's
    std::fprintf(stderr, "qkv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
