#include "engine/op_registry.h"
#include "nn/gradcheck_cases.h"
#include "train/commands/commands.h"
#ifdef QKV_WITH_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace qkv::cli {

void initialize_layers() {
#ifdef QKV_WITH_CUDA
  qkv::cuda::init();  // registers the CUDA backend when a GPU is present; silent otherwise
#endif
  // The engine's cases are in the global registry from the start; the layers above add theirs.
  static bool registered = false;
  if (!registered) {
    nn::register_gradcheck_cases(OpRegistry::global());
    registered = true;
  }
}

}  // namespace qkv::cli
