// `qkv gradcheck`: runs every registered op's gradcheck case in float64 and prints a table (or
// JSON lines); exits non-zero if any op fails.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/op_registry.h"
#include "train/commands/commands.h"

namespace qkv::cli {

int gradcheck_command(const GradcheckOptions& options) {
  const OpRegistry& registry = OpRegistry::global();
  int failed = 0, run = 0, passed = 0;
  if (!options.json)
    std::printf("%-40s %-7s %12s %12s  %s\n", "op", "layer", "max_abs_err", "max_rel_err",
                "result");
  for (const GradcheckCase& c : registry.cases()) {
    if (!options.filter.empty() && c.op.find(options.filter) == std::string::npos) continue;
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
  auto missing = registry.ops_without_case();
  for (const auto& op : missing) {
    ++failed;
    if (options.json)
      std::printf("%s\n",
                  nlohmann::json({{"op", op}, {"pass", false}, {"detail", "no gradcheck case"}})
                      .dump()
                      .c_str());
    else
      std::printf("%-40s %-7s %12s %12s  FAIL  no gradcheck case\n", op.c_str(), "", "-", "-");
  }
  if (!options.json)
    std::printf("\n%d cases over %zu ops: %d passed, %d failed\n", run, registry.size(), passed,
                failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace qkv::cli
