// Checking every CUDA runtime and cuBLAS call.
//
// A failed call throws qkv::Error naming the call, the file and the line, so a failure deep in a
// kernel launch reads like any other qkv error instead of a silent wrong result later.
// Kernel launches are checked with QKV_CUDA_CHECK_LAUNCH() right after QKV_LAUNCH
// (cuda/launch.cuh).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "engine/error.h"

namespace qkv::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                          int line) {
  throw Error(std::string("cuda: ") + call + " failed: " + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line));
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call,
                                            const char* file, int line) {
  throw Error(std::string("cublas: ") + call + " failed: " + cublasGetStatusName(status) + " (" +
              cublasGetStatusString(status) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace qkv::cuda::detail

#define QKV_CUDA_CHECK(call)                                                         \
  do {                                                                               \
    cudaError_t qkv_status_ = (call);                                                \
    if (qkv_status_ != cudaSuccess)                                                  \
      ::qkv::cuda::detail::throw_cuda_error(qkv_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define QKV_CUBLAS_CHECK(call)                                                         \
  do {                                                                                 \
    cublasStatus_t qkv_status_ = (call);                                               \
    if (qkv_status_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::qkv::cuda::detail::throw_cublas_error(qkv_status_, #call, __FILE__, __LINE__); \
  } while (0)

// A launch reports bad configurations (too many threads, too much shared memory) only through
// cudaGetLastError; errors inside the kernel surface at the next synchronizing call.
#define QKV_CUDA_CHECK_LAUNCH() QKV_CUDA_CHECK(cudaGetLastError())
