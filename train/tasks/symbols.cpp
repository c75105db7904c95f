// copy, reverse, sort: random strings of symbols and a rearrangement of them.
#include <algorithm>

#include "engine/error.h"
#include "train/tasks/task.h"

namespace qkv::train {

namespace {

std::string random_symbols(Rng& rng, const SymbolTaskOptions& o) {
  QKV_CHECK(o.symbols >= 1 && o.symbols <= 26, "--task", "symbols must be in 1..26, got ",
            o.symbols);
  QKV_CHECK(o.min_length >= 1 && o.min_length <= o.max_length, "--task",
            "need 1 <= min_length <= max_length, got ", o.min_length, " and ", o.max_length);
  auto length = uniform_int(rng, o.min_length, o.max_length);
  std::string s;
  for (int64_t i = 0; i < length; ++i) s += char('a' + uniform_int(rng, 0, o.symbols - 1));
  return s;
}

}  // namespace

Pair make_copy_pair(Rng& rng, const SymbolTaskOptions& options) {
  std::string s = random_symbols(rng, options);
  return {s, s};
}

Pair make_reverse_pair(Rng& rng, const SymbolTaskOptions& options) {
  std::string s = random_symbols(rng, options);
  return {s, std::string(s.rbegin(), s.rend())};
}

Pair make_sort_pair(Rng& rng, const SymbolTaskOptions& options) {
  std::string s = random_symbols(rng, options);
  std::string sorted = s;
  std::sort(sorted.begin(), sorted.end());
  return {s, sorted};
}

}  // namespace qkv::train
