// train/config: command-line overrides ("--steps 500", "--channels 16,32"), one per line of the
// input as "key value". Each override either sets its field or is refused with a qkv::Error naming
// the command line; a config they all leave valid must write out as JSON that loads back to the
// same config.
#include <nlohmann/json.hpp>
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "train/config.h"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  train::Config config;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    const size_t space = line.find(' ');
    const std::string key(line.substr(0, space));
    const std::string value(space == std::string_view::npos ? "" : line.substr(space + 1));
    if (!fuzz::accepts("command line",
                       [&] { train::set_config_value(config, key, value, "command line"); }))
      return 0;
  }
  if (!fuzz::accepts("command line", [&] { train::validate_config(config, "command line"); }))
    return 0;
  const nlohmann::json written = train::config_to_json(config);
  train::Config again = train::parse_config(written.dump(), "written.json");
  FUZZ_CHECK(train::config_to_json(again) == written);
  return 0;
}
