#include "nn/unique_keys_json.h"

#include <set>
#include <vector>

#include "engine/error.h"

namespace qkv::nn {

using nlohmann::json;

json parse_json_unique_keys(std::string_view text, const std::string& source) {
  std::vector<std::set<std::string>> open_objects;  // the keys seen so far in each open object
  std::string repeated;
  auto watch = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && repeated.empty()) repeated = key;
    }
    return true;
  };
  json j = json::parse(text, watch);
  if (!repeated.empty())
    throw Error(source + ": key '" + repeated + "' appears twice in one object");
  return j;
}

json parse_json_text(std::string_view text, const std::string& source) {
  try {
    return parse_json_unique_keys(text, source);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw Error(source + ": not valid JSON: " + e.what());
  }
}

}  // namespace qkv::nn
