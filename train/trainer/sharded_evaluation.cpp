#include "train/trainer/sharded_evaluation.h"

#include <cmath>

#include "engine/ops.h"

namespace qkv::train {

std::pair<size_t, size_t> evaluation_share(size_t n, const ProcessGroup& group) {
  const auto [begin, end] = rank_chunk(int64_t(n), group.size(), group.rank());
  return {size_t(begin), size_t(end)};
}

std::vector<int64_t> sum_counts(const std::vector<int64_t>& counts, ProcessGroup& group) {
  if (group.size() == 1) return counts;
  std::vector<double> values(counts.begin(), counts.end());
  Tensor t = tensor(values, {int64_t(values.size())}, TensorOptions{}.with(DType::i64));
  group.allreduce_sum(t);
  return t.to_vector<int64_t>();
}

int64_t count_of(double fraction, int64_t total) {
  return int64_t(std::llround(fraction * double(total)));
}

}  // namespace qkv::train
