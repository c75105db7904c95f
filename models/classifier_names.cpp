#include "models/classifier_names.h"

namespace qkv::models {

const std::vector<std::string>& image_classifier_names() {
  static const std::vector<std::string> names = {"cnn", "vit"};
  return names;
}

const std::vector<std::string>& pooling_names() {
  static const std::vector<std::string> names = {"cls", "mean"};
  return names;
}

}  // namespace qkv::models
