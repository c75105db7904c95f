// Checking a name against the list of names a layer knows (positional encodings, block attention,
// pooling), with the message every such check gives.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine/error.h"

namespace qkv {

// "a, b, c": a list of names for a message.
inline std::string comma_list(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return list;
}

// Throws qkv::Error("<op>: unknown <what> '<name>' (<names>)") unless `name` is one of `names`.
inline void check_name_among(const std::string& name, const std::vector<std::string>& names,
                             const char* op, const char* what) {
  QKV_CHECK(std::find(names.begin(), names.end(), name) != names.end(), op, "unknown ", what, " '",
            name, "' (", comma_list(names), ")");
}

}  // namespace qkv
