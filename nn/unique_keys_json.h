// JSON parsing that refuses a key given twice in one object.
//
// nlohmann::json (like most parsers) keeps the last of two equal keys, so a config or a safetensors
// header with "lr" twice would silently use one of them. Files qkv reads from people go through
// this instead of json::parse.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace qkv::nn {

// Parses `text` like nlohmann::json::parse (throwing its exceptions on bad syntax), then throws
// qkv::Error("<source>: key 'K' appears twice in one object") for the first repeated key.
nlohmann::json parse_json_unique_keys(std::string_view text, const std::string& source);

// The same for a file a person wrote: bad syntax (or a number out of range, 1e999) throws
// qkv::Error("<source>: not valid JSON: <the parser's reason>") too.
nlohmann::json parse_json_text(std::string_view text, const std::string& source);

}  // namespace qkv::nn
