#include "train/commands/commands.h"
#ifdef QKV_WITH_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace qkv::cli {

void initialize_layers() {
#ifdef QKV_WITH_CUDA
  qkv::cuda::init();  // registers the CUDA backend when a GPU is present; silent otherwise
#endif
}

}  // namespace qkv::cli
