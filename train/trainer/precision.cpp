#include "train/trainer/precision.h"

#include <vector>

#include "engine/error.h"
#include "train/trainer/run_choices.h"

namespace qkv::train {

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = {"fp32", "bf16"};
  return names;
}

DType compute_dtype(const std::string& precision) {
  if (precision == "fp32") return DType::f32;
  QKV_CHECK(precision == "bf16", "--precision", "expected fp32 or bf16, got '", precision, "'");
  return DType::bf16;
}

}  // namespace qkv::train
