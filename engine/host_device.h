// QKV_HOST_DEVICE marks the few engine functions that CUDA kernels call too (engine/random.h,
// engine/scalar_math.h): under nvcc they compile for both sides, elsewhere the mark is empty.
#pragma once

#ifdef __CUDACC__
#define QKV_HOST_DEVICE __host__ __device__
#else
#define QKV_HOST_DEVICE
#endif
