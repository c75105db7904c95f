// GPT's gradcheck cases (see engine/op_registry.h): the whole model in float64, with learned and
// with rotary positions, part of the models layer's cases (models/gradcheck_cases.cpp).
#pragma once

#include "engine/op_registry.h"

namespace qkv::models {

void register_gpt_gradcheck_cases(qkv::OpRegistry& registry);

}  // namespace qkv::models
