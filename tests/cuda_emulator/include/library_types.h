// cudaDataType for the CPU emulator (tests/cuda_emulator); values as in NVIDIA's header.
#pragma once

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16BF = 14,
};
typedef enum cudaDataType_t cudaDataType;
