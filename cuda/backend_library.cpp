// The entry point of libqkv_cuda.so, which the engine calls when a CUDA device is first asked for
// (engine/device_loader.h): probe for a GPU, register the backend, say what was found.
#include <cstdio>

#include "cuda/cuda_backend.h"
#include "engine/device_loader.h"

extern "C" int qkv_backend_init(char* status, size_t status_size) {
  const bool registered = qkv::cuda::init();
  std::snprintf(status, status_size, "%s", qkv::cuda::status().c_str());
  return registered ? 1 : 0;
}
