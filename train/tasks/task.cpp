#include "train/tasks/task.h"

#include <algorithm>
#include <unordered_set>

#include "engine/error.h"
#include "train/tasks/task_table.h"

namespace qkv::train {

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& t : task_table())
    if (t.generate) names.push_back(t.name);
  return names;
}

int64_t uniform_int(Rng& rng, int64_t low, int64_t high) {
  // std::uniform_int_distribution is implementation-defined; this keeps a seed's data the same
  // across standard libraries. The modulo bias is below 2^-40 for our ranges.
  uint64_t span = uint64_t(high - low) + 1;
  return low + int64_t(rng() % span);
}

namespace {

Pair make_pair(const std::string& name, Rng& rng, const SymbolTaskOptions& options) {
  const TaskDefinition& definition = task_definition(name);
  if (!definition.generate) {
    std::string valid;
    for (const auto& n : task_names()) valid += (valid.empty() ? "" : ", ") + n;
    throw Error("--task: task '" + name + "' is not generated from a seed (generated: " + valid +
                ")");
  }
  return definition.generate(rng, options);
}

}  // namespace

std::vector<Pair> generate_task(const std::string& name, size_t count, uint64_t seed,
                                const SymbolTaskOptions& options) {
  Rng rng(seed);
  std::vector<Pair> pairs;
  pairs.reserve(count);
  for (size_t i = 0; i < count; ++i) pairs.push_back(make_pair(name, rng, options));
  if (count == 0) make_pair(name, rng, options);  // still reject an unknown name
  return pairs;
}

TaskSplits make_splits(const std::string& name, size_t n_train, size_t n_valid, size_t n_test,
                       uint64_t seed, const SymbolTaskOptions& options) {
  Rng rng(seed);
  TaskSplits splits;
  std::unordered_set<std::string> seen;
  const size_t wanted = n_train + n_valid + n_test;
  // A task whose source space is nearly used up would loop for ever; give up after many misses.
  size_t misses = 0;
  const size_t max_misses = 1000 + 20 * wanted;
  while (seen.size() < wanted) {
    Pair p = make_pair(name, rng, options);
    if (!seen.insert(p.source).second) {
      if (++misses > max_misses)
        throw Error("--task: task '" + name + "' produced only " + std::to_string(seen.size()) +
                    " distinct sources of the " + std::to_string(wanted) +
                    " asked for; ask for fewer or allow longer strings");
      continue;
    }
    // Fill in order train, valid, test: all three come from one stream of unique sources.
    if (splits.train.size() < n_train)
      splits.train.push_back(std::move(p));
    else if (splits.valid.size() < n_valid)
      splits.valid.push_back(std::move(p));
    else
      splits.test.push_back(std::move(p));
  }
  return splits;
}

}  // namespace qkv::train
