#include "train/data/order_task.h"

#include <unordered_set>

#include "train/tasks/task.h"

namespace qkv::train {

namespace {

TextExample make_order_example(Rng& rng, const OrderTaskOptions& o) {
  // Words as numbers while placing markers: filler k is k >= 0, the markers are kA and kB.
  constexpr int64_t kA = -1, kB = -2;
  auto length = size_t(uniform_int(rng, o.min_length, o.max_length));
  std::vector<int64_t> words(length);
  for (auto& w : words) w = uniform_int(rng, 0, o.filler_words - 1);
  // Each marker goes on one to three positions; a marker may overwrite a filler, never a marker.
  for (int64_t marker : {kA, kB}) {
    int64_t copies = uniform_int(rng, 1, 3);
    for (int64_t c = 0; c < copies; ++c) {
      size_t at;
      do at = size_t(uniform_int(rng, 0, int64_t(length) - 1));
      while (words[at] < 0);
      words[at] = marker;
    }
  }
  TextExample e{"", -1};
  for (int64_t w : words) {
    if (!e.text.empty()) e.text += ' ';
    if (w >= 0) {
      e.text += 'w';
      e.text += std::to_string(w);
    } else {
      e.text += w == kA ? 'A' : 'B';
      if (e.label < 0) e.label = w == kA ? 0 : 1;
    }
  }
  return e;
}

}  // namespace

TextClassificationSplits make_order_task(size_t n_train, size_t n_valid, size_t n_test,
                                         uint64_t seed, const OrderTaskOptions& options) {
  QKV_CHECK(options.min_length >= 6 && options.min_length <= options.max_length, "--task order",
            "need 6 <= min_length <= max_length, got ", options.min_length, " and ",
            options.max_length);
  QKV_CHECK(options.filler_words >= 1, "--task order", "filler_words must be positive");
  Rng rng(seed);
  TextClassificationSplits s;
  s.labels = {"A-first", "B-first"};
  std::unordered_set<std::string> seen;
  while (s.train.size() + s.valid.size() + s.test.size() < n_train + n_valid + n_test) {
    TextExample e = make_order_example(rng, options);
    if (!seen.insert(e.text).second) continue;  // sequences this long almost never repeat
    auto& dest = s.train.size() < n_train ? s.train : s.valid.size() < n_valid ? s.valid : s.test;
    dest.push_back(std::move(e));
  }
  return s;
}

}  // namespace qkv::train
