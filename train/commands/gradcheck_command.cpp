// `qkv gradcheck`: runs every registered case (engine, nn, models) in float64 and prints a table
// (or JSON lines); exits non-zero if any case fails, if a declared op has no case, or if --filter
// matches no case.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/op_registry.h"
#include "models/gradcheck_cases.h"
#include "train/commands/commands.h"

namespace qkv::cli {

int gradcheck_command(const GradcheckOptions& options) {
  OpRegistry& registry = OpRegistry::global();  // the engine's and nn's cases (initialize_layers)
  static bool models_registered = false;
  if (!models_registered) {
    models::register_gradcheck_cases(registry);
    models_registered = true;
  }
  std::vector<const GradcheckCase*> selected;
  for (const GradcheckCase& c : registry.cases())
    if (options.filter.empty() || c.op.find(options.filter) != std::string::npos)
      selected.push_back(&c);
  QKV_CHECK(!selected.empty(), "gradcheck", "--filter '", options.filter,
            "' matches no case (names are listed by `qkv gradcheck`)");
  int failed = 0, run = 0, passed = 0, skipped = 0;
  if (!options.json)
    std::printf("%-40s %-7s %12s %12s  %s\n", "op", "layer", "max_abs_err", "max_rel_err",
                "result");
  for (const GradcheckCase* case_ptr : selected) {
    const GradcheckCase& c = *case_ptr;
    if (!OpRegistry::runnable(c)) {
      ++skipped;
      if (options.json)
        std::printf(
            "%s\n",
            nlohmann::json({{"op", c.op}, {"layer", c.layer}, {"skipped", true}}).dump().c_str());
      else
        std::printf("%-40s %-7s %12s %12s  skipped (needs a CUDA device)\n", c.op.c_str(),
                    c.layer.c_str(), "-", "-");
      continue;
    }
    GradcheckResult r = OpRegistry::run(c);
    ++run;
    if (r.ok)
      ++passed;
    else
      ++failed;
    if (options.json) {
      nlohmann::json line = {{"op", c.op},
                             {"layer", c.layer},
                             {"max_abs_err", r.max_abs_err},
                             {"max_rel_err", r.max_rel_err},
                             {"pass", r.ok}};
      if (!r.ok) line["detail"] = r.message;
      std::printf("%s\n", line.dump().c_str());
    } else {
      std::printf("%-40s %-7s %12.3e %12.3e  %s\n", c.op.c_str(), c.layer.c_str(), r.max_abs_err,
                  r.max_rel_err, r.ok ? "pass" : ("FAIL  " + r.message).c_str());
    }
  }
  for (const OpDeclaration& d : registry.ops_without_case()) {
    if (d.name.find(options.filter) == std::string_view::npos) continue;
    ++failed;
    std::string op(d.name),
        detail = qkv::detail::concat("no gradcheck case (declared at ", d.file, ":", d.line, ")");
    if (options.json)
      std::printf("%s\n",
                  nlohmann::json({{"op", op}, {"pass", false}, {"detail", detail}}).dump().c_str());
    else
      std::printf("%-40s %-7s %12s %12s  FAIL  %s\n", op.c_str(), std::string(d.layer).c_str(), "-",
                  "-", detail.c_str());
  }
  if (!options.json)
    std::printf("\n%d cases over %zu names: %d passed, %d failed, %d skipped\n", run,
                registry.size(), passed, failed, skipped);
  return failed == 0 ? 0 : 1;
}

}  // namespace qkv::cli
