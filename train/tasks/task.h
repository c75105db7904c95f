// Toy translation tasks, generated from a seed.
//
// Each task maps a source string to a target string by a rule a transformer can learn in minutes
// on a CPU: copy, reverse, sort a string of symbols; read a date written by a human and write it in
// ISO form; write a number in English words. They are small enough to train to 100% exact match,
// which makes them good tests of the whole stack: a bug anywhere shows as a plateau below 100%.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace qkv::train {

struct Pair {
  std::string source;
  std::string target;
  bool operator==(const Pair&) const = default;
};

struct TaskSplits {
  std::vector<Pair> train, valid, test;
};

// Options of the symbol tasks (copy, reverse, sort); the other tasks ignore them.
struct SymbolTaskOptions {
  int min_length = 3;
  int max_length = 12;
  int symbols = 12;  // the first `symbols` lowercase letters make the alphabet (at most 26)
};

// The tasks generate_task knows: the rows of task_table() (task_table.h) with a PairGenerator.
std::vector<std::string> task_names();

// `count` pairs from task `name`, the same for the same seed. Duplicates are possible (use
// make_splits for disjoint sets). Throws qkv::Error("--task: unknown task 'x' (valid: ...)").
std::vector<Pair> generate_task(const std::string& name, size_t count, uint64_t seed,
                                const SymbolTaskOptions& options = {});

// Train, valid and test sets with no source string in two of them (and none repeated), so that
// validation measures generalization, not memory. Throws qkv::Error when the task cannot produce
// that many distinct sources (e.g. copy with tiny lengths).
TaskSplits make_splits(const std::string& name, size_t n_train, size_t n_valid, size_t n_test,
                       uint64_t seed, const SymbolTaskOptions& options = {});

// ---- one generator per task (tasks/*.cpp) ----------------------------------------------------
using Rng = std::mt19937_64;
Pair make_copy_pair(Rng& rng, const SymbolTaskOptions& options);
Pair make_reverse_pair(Rng& rng, const SymbolTaskOptions& options);
Pair make_sort_pair(Rng& rng, const SymbolTaskOptions& options);
Pair make_date_pair(Rng& rng);
Pair make_number_pair(Rng& rng);

// Uniform integer in [low, high].
int64_t uniform_int(Rng& rng, int64_t low, int64_t high);

}  // namespace qkv::train
