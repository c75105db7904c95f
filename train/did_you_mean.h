// "Did you mean ...?" for every name a user types: config keys, flags, subcommands, tasks.
#pragma once

#include <string>
#include <vector>

namespace qkv::train {

// Levenshtein distance (insertions, deletions, substitutions, each costing 1).
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `name` by edit distance (the first of equals); "" when there is none.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" for the closest candidate, or "" when none is near enough to be a typo
// (more than half of the longer name would have to change).
std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace qkv::train
