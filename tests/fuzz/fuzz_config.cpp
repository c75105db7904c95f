// train/config: a --config JSON file. A config that loads must write out as JSON that loads back
// to the same config, and validate_config may only answer with qkv::Error.
#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_support.h"
#include "train/config.h"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  train::Config config;
  if (!fuzz::accepts("run.json",
                     [&] { config = train::parse_config(fuzz::as_text(data, size), "run.json"); }))
    return 0;
  fuzz::accepts("run.json", [&] { train::validate_config(config, "run.json"); });
  const nlohmann::json written = train::config_to_json(config);
  train::Config again = train::parse_config(written.dump(), "written.json");
  FUZZ_CHECK(train::config_to_json(again) == written);
  return 0;
}
