// Evaluation metrics on decoded sequences, labels and attention weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::train {

// Fraction of predictions equal to their reference, whole string.
double exact_match(const std::vector<std::string>& predictions,
                   const std::vector<std::string>& references);

// Fraction of reference positions where the prediction has the same token; a prediction shorter
// than its reference counts the missing positions as wrong, and extra predicted tokens count as
// wrong too (the denominator is the longer of the two), so padding a guess cannot raise it.
double token_accuracy(const std::vector<std::vector<int64_t>>& predictions,
                      const std::vector<std::vector<int64_t>>& references);

double classification_accuracy(const std::vector<int64_t>& predicted,
                               const std::vector<int64_t>& labels);

// Entropy in nats of each row of `weights` [rows, cols] (each row a distribution): 0 for a row
// that looks at one key, log(cols) for a uniform row. Low entropy = sharp attention.
std::vector<double> attention_row_entropy(const std::vector<float>& weights, int64_t rows,
                                          int64_t cols);

}  // namespace qkv::train
