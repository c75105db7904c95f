// GPT's gradcheck cases (see engine/op_registry.h): the whole model in float64, with learned and
// with rotary positions. The models layer has no registry of its own; tests/models runs these.
#pragma once

#include "engine/op_registry.h"

namespace qkv::models {

void register_gpt_gradcheck_cases(qkv::OpRegistry& registry);

}  // namespace qkv::models
