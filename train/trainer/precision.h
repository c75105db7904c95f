// --precision: the dtype the matrix products of a run (training, validation, test, `qkv eval`)
// are computed in.
#pragma once

#include <string>

#include "engine/dtype.h"

namespace qkv::train {

// "fp32" or "bf16" as the dtype of an Autocast scope (engine/autocast.h). The parameters and
// checkpoints stay float32 either way. Throws qkv::Error naming --precision for another name.
DType compute_dtype(const std::string& precision);

}  // namespace qkv::train
