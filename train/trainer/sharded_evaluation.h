// Evaluation split over the ranks of `mpirun -np N`: rank r scores its contiguous share of the
// examples (engine/process_group.h's rank_chunk) and the counts are all-reduced, so every rank
// gets the score of the whole split. The counts are integers, so the score is the same bits as
// one process scoring every example (right / total, one division).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/process_group.h"

namespace qkv::train {

// [begin, end) of the first `n` examples that this rank scores.
std::pair<size_t, size_t> evaluation_share(size_t n, const ProcessGroup& group);

// Every rank's `counts` (the same length everywhere), added exactly; one process gets its own.
std::vector<int64_t> sum_counts(const std::vector<int64_t>& counts, ProcessGroup& group);

// `fraction` of `total` as the whole number it was computed from (right / total).
int64_t count_of(double fraction, int64_t total);

}  // namespace qkv::train
