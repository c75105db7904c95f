// What a run says when a training step's loss or gradient norm is NaN or Inf: which op produced
// it, found by replaying the step under anomaly mode, and where the last good checkpoint is.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "train/run_dir.h"

namespace qkv::train {

// Why a training step went non-finite, as one line: re-runs the step (`redo`: the same batch's
// forward and backward) under anomaly mode, with the default generator rewound to
// `generator_offset` (where the step began, so dropout draws the same masks), and returns the
// anomaly's description of the first op that produced a NaN or Inf. The caller then throws, so
// nothing after the failed step - no optimizer update, no checkpoint - is ever written.
std::string name_the_non_finite_op(uint64_t generator_offset, const std::function<void()>& redo);

// "train: the loss became non-finite at step 7 (op 'log' produced NaN ...); the last good
// checkpoint is kept in runs/x (try a lower --lr or --clip 1)".
std::string non_finite_step_message(const std::string& what, int64_t step, const RunDir& run,
                                    const std::string& cause);

}  // namespace qkv::train
