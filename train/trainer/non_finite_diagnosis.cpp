#include "train/trainer/non_finite_diagnosis.h"

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/random.h"

namespace qkv::train {

std::string name_the_non_finite_op(uint64_t generator_offset, const std::function<void()>& redo) {
  const std::string prefix = "anomaly: ";
  default_generator().set_offset(generator_offset);
  try {
    AnomalyMode anomaly;
    redo();
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.rfind(prefix, 0) == 0) return m.substr(prefix.size());
    return "re-running the step under anomaly mode failed: " + m;
  }
  // Forward and backward came out finite the second time: the first run was not reproduced.
  return "re-running the step under anomaly mode found no NaN or Inf";
}

std::string non_finite_step_message(const std::string& what, int64_t step, const RunDir& run,
                                    const std::string& cause) {
  return "train: the " + what + " became non-finite at step " + std::to_string(step) + " (" +
         cause + "); the last good checkpoint is kept in " + run.path() +
         " (try a lower --lr or --clip 1)";
}

}  // namespace qkv::train
