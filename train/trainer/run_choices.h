// The names the trainer turns into objects (optimizer_setup.cpp and precision.cpp make them):
// schedules, optimizers, compute precisions. The config's choices, --help and `qkv eval
// --precision` read these lists, so a name is added where it is implemented and nowhere else.
#pragma once

#include <string>
#include <vector>

namespace qkv::train {

const std::vector<std::string>& schedule_names();   // make_schedule
const std::vector<std::string>& optimizer_names();  // make_optimizer
const std::vector<std::string>& precision_names();  // compute_dtype

}  // namespace qkv::train
