// The qkv command line as one table: every subcommand is a row {name, help, add_options} (or a
// group of rows, such as `qkv bench ...`), and main.cpp builds the CLI11 parser from it. Adding a
// command is adding a row (docs/TRAINING.md, "Adding a command").
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace qkv::cli {

// The options given before or after any subcommand.
struct GlobalOptions {
  int threads = 0;  // 0 = QKV_NUM_THREADS or all cores
};

// How a parsed command runs: its exit code.
using Runner = std::function<int(const GlobalOptions&)>;

struct Command {
  std::string name, help;
  // Declares the command's options on its CLI11 app; the Runner it returns reads them once parsed.
  Runner (*add_options)(CLI::App& app) = nullptr;
  std::vector<Command> subcommands;  // a group: exactly one of them runs (add_options unused)
};

// A command with its own options, and a group of them.
Command leaf(std::string name, std::string help, Runner (*add_options)(CLI::App&));
Command group(std::string name, std::string help, std::vector<Command> subcommands);

// Every command of `qkv`, in the order --help lists them.
const std::vector<Command>& command_table();
// `qkv train translate` and `qkv train classify` (train_commands.cpp).
Command train_command_group();

// Builds `table` under `parent` and returns each runnable app with its Runner.
std::vector<std::pair<CLI::App*, Runner>> add_commands(CLI::App& parent,
                                                       const std::vector<Command>& table);

// The options several commands share, declared the same way everywhere.
CLI::Option* add_run_option(CLI::App& app, std::string& run);
CLI::Option* add_device_option(CLI::App& app, std::string& device, const std::string& help);
CLI::Option* add_json_flag(CLI::App& app, bool& json, const std::string& help);
CLI::Option* add_beam_option(CLI::App& app, int64_t& beam);
// --last: a run's last checkpoint (model.safetensors) instead of its best validation model
// (best.safetensors, train/trainer/best_model.h).
CLI::Option* add_last_flag(CLI::App& app, bool& last);

// For a failed parse of `args` by `app`: "unknown option --stpes (did you mean '--steps'?)" or
// "unknown command 'trian' (did you mean 'train'?)" for the first name that no command in the
// chain knows; "" when every name is known.
std::string unknown_name_message(CLI::App& app, const std::vector<std::string>& args);

}  // namespace qkv::cli
