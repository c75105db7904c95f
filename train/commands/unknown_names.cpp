// Did-you-mean for the command line: CLI11 reports a mistyped flag as an unexpected argument and a
// mistyped subcommand as a missing one; this walks the arguments as the parser did and names the
// first word that no command in the chain knows, with the closest known word.
#include "train/commands/command_table.h"
#include "train/did_you_mean.h"

namespace qkv::cli {

namespace {

// The option of the commands in `chain` (innermost first) that `name` ("--steps", "-h") names.
const CLI::Option* find_option(const std::vector<CLI::App*>& chain, const std::string& name) {
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    for (const CLI::Option* option : (*it)->get_options())
      if (option->check_name(name)) return option;
  return nullptr;
}

std::vector<std::string> long_names(const std::vector<CLI::App*>& chain) {
  std::vector<std::string> names;
  for (const CLI::App* app : chain)
    for (const CLI::Option* option : app->get_options())
      for (const auto& name : option->get_lnames()) names.push_back("--" + name);
  return names;
}

}  // namespace

std::string unknown_name_message(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<CLI::App*> chain = {&app};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.size() > 1 && arg[0] == '-' && !(arg[1] >= '0' && arg[1] <= '9') && arg[1] != '.') {
      const std::string name = arg.substr(0, arg.find('='));
      const CLI::Option* option = find_option(chain, name);
      if (!option) return "unknown option " + name + train::did_you_mean(name, long_names(chain));
      if (option->get_type_size() != 0 && name.size() == arg.size()) ++i;  // skip its value
      continue;
    }
    CLI::App* current = chain.back();
    CLI::App* next = nullptr;
    std::vector<std::string> names;
    for (CLI::App* sub : current->get_subcommands({})) {
      names.push_back(sub->get_name());
      if (sub->get_name() == arg) next = sub;
    }
    if (next) {
      chain.push_back(next);
      continue;
    }
    if (current->get_require_subcommand_min() > 0)
      return "unknown command '" + arg + "'" + train::did_you_mean(arg, names);
  }
  return "";
}

}  // namespace qkv::cli
