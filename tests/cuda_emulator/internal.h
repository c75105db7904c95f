// Shared between the emulator's parts (not for kernels): the runtime's pending error.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace qkv::cuda_emulator {

// The error that the next cudaGetLastError() or synchronizing call returns, and the detail that
// cudaGetErrorString() adds to its name (kernels run at launch, so their failures are known there).
void set_pending_error(cudaError_t error, std::string detail);

}  // namespace qkv::cuda_emulator
