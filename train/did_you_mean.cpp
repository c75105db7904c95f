#include "train/did_you_mean.h"

#include <algorithm>
#include <cstdint>

namespace qkv::train {

size_t edit_distance(const std::string& a, const std::string& b) {
  // One row of the dynamic-programming table at a time.
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& candidate : candidates) {
    size_t d = edit_distance(name, candidate);
    if (d < best_distance) best = candidate, best_distance = d;
  }
  return best;
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  const std::string best = closest_name(name, candidates);
  if (best.empty()) return "";
  if (2 * edit_distance(name, best) > std::max(name.size(), best.size())) return "";
  return " (did you mean '" + best + "'?)";
}

}  // namespace qkv::train
