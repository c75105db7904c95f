#include "train/metrics.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"

namespace qkv::train {

double exact_match(const std::vector<std::string>& predictions,
                   const std::vector<std::string>& references) {
  QKV_CHECK(predictions.size() == references.size(), "exact_match", predictions.size(),
            " predictions for ", references.size(), " references");
  if (references.empty()) return 0.0;
  size_t right = 0;
  for (size_t i = 0; i < references.size(); ++i) right += predictions[i] == references[i];
  return double(right) / double(references.size());
}

double token_accuracy(const std::vector<std::vector<int64_t>>& predictions,
                      const std::vector<std::vector<int64_t>>& references) {
  QKV_CHECK(predictions.size() == references.size(), "token_accuracy", predictions.size(),
            " predictions for ", references.size(), " references");
  size_t right = 0, total = 0;
  for (size_t i = 0; i < references.size(); ++i) {
    const auto& p = predictions[i];
    const auto& r = references[i];
    total += std::max(p.size(), r.size());
    for (size_t k = 0; k < std::min(p.size(), r.size()); ++k) right += p[k] == r[k];
  }
  return total == 0 ? 0.0 : double(right) / double(total);
}

double classification_accuracy(const std::vector<int64_t>& predicted,
                               const std::vector<int64_t>& labels) {
  QKV_CHECK(predicted.size() == labels.size(), "classification_accuracy", predicted.size(),
            " predictions for ", labels.size(), " labels");
  if (labels.empty()) return 0.0;
  size_t right = 0;
  for (size_t i = 0; i < labels.size(); ++i) right += predicted[i] == labels[i];
  return double(right) / double(labels.size());
}

std::vector<double> attention_row_entropy(const std::vector<float>& weights, int64_t rows,
                                          int64_t cols) {
  QKV_CHECK(rows >= 0 && cols > 0 && weights.size() == size_t(rows * cols), "attention_row_entropy",
            weights.size(), " weights for ", rows, "x", cols);
  std::vector<double> entropy(size_t(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double p = weights[size_t(r * cols + c)];
      if (p > 0) entropy[size_t(r)] -= p * std::log(p);  // 0 log 0 = 0
    }
  return entropy;
}

}  // namespace qkv::train
