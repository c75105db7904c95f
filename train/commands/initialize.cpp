#include "engine/op_registry.h"
#include "nn/gradcheck_cases.h"
#include "train/commands/commands.h"

namespace qkv::cli {

// The CUDA backend is not among the layers: the engine loads it when a CUDA device is first asked
// for (engine/device_loader.h).
void initialize_layers() {
  // The engine's cases are in the global registry from the start; the layers above add theirs.
  static bool registered = false;
  if (!registered) {
    nn::register_gradcheck_cases(OpRegistry::global());
    registered = true;
  }
}

}  // namespace qkv::cli
