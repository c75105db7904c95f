// The language model's data: one UTF-8 text file, split into a training part and the last
// `valid_fraction` of it as the validation part - contiguous, never shuffled into training, so
// validation measures text the model has not seen (a random split of overlapping windows would
// leak it). Batches are windows of context + 1 tokens (inputs and, shifted by one, targets) at
// random starts drawn from a seeded generator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/random.h"
#include "engine/tensor.h"

namespace qkv::train {

struct LmText {
  std::string path;
  std::string train, valid;  // train + valid is the file, cut at a character boundary
};

// Throws qkv::Error naming `path` for a file that is missing, unreadable, empty or not UTF-8 (with
// the byte offset), or for a valid_fraction outside (0, 1) (naming --valid-fraction).
LmText read_lm_text(const std::string& path, double valid_fraction = 0.1);

class TokenWindows {
 public:
  // `what` names the tokens in errors ("data.txt: training split"); throws when there are not
  // enough of them for one window of context + 1.
  TokenWindows(std::vector<int64_t> ids, int64_t context, const std::string& what);

  int64_t size() const { return int64_t(ids_.size()); }
  int64_t context() const { return context_; }
  const std::vector<int64_t>& ids() const { return ids_; }

  // int64 [batch, context + 1]: each row the tokens from a start drawn uniformly from every start
  // a whole window fits at, one counter of `gen` per row.
  Tensor random_batch(int64_t batch, Generator& gen) const;
  // int64 [n, context + 1]: the windows starting at 0, context, 2 context, ... (consecutive
  // windows share one token, so every token after the first is a target exactly once), at most
  // max_windows of them.
  Tensor sequential_windows(int64_t max_windows) const;

 private:
  std::vector<int64_t> ids_;
  int64_t context_;
};

}  // namespace qkv::train
