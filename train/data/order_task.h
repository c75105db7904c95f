// A synthetic text-classification task that a bag of words cannot solve.
//
// Each example is a long sequence of filler words with the two marker words "A" and "B" each
// appearing one to three times somewhere in it. The label is "A-first" when the first A comes
// before the first B, else "B-first". Both labels have the same words in the same numbers, so a
// model must relate positions far apart: mean-pooled embeddings score 50%, attention can reach
// 100%. That makes it a test of attention and positional encoding, not of the classifier head.
#pragma once

#include <cstdint>

#include "train/data/split.h"
#include "train/data/tsv.h"

namespace qkv::train {

struct OrderTaskOptions {
  int min_length = 24;
  int max_length = 64;
  int filler_words = 16;  // "w0" .. "w15"
};

// Labels are {"A-first", "B-first"}; train/valid/test have no text in common.
struct TextClassificationSplits {
  std::vector<std::string> labels;
  std::vector<TextExample> train, valid, test;
};

TextClassificationSplits make_order_task(size_t n_train, size_t n_valid, size_t n_test,
                                         uint64_t seed, const OrderTaskOptions& options = {});

}  // namespace qkv::train
