// The CUDA backend's public face: probing for a GPU, registering the backend, and its options.
//
// Nothing here names a CUDA type, so any layer (the CLI, tests, benchmarks) can include it in a
// build with QKV_WITH_CUDA defined. The backend links the CUDA runtime, never the driver library,
// so a binary built with CUDA starts (and reports "unavailable") on a machine without a GPU.
#pragma once

#include <string>

namespace qkv::cuda {

// Probes for a GPU and, if one is present, registers the CUDA backend for DeviceKind::cuda.
// Returns whether the backend is available; never throws for a missing driver or device.
// Safe to call more than once (the probe runs once).
bool init();

// Whether init() found a usable device (runs the probe if init() has not been called).
bool available();

// "NVIDIA H200, 139 GiB, compute capability 9.0", or why the backend is unavailable.
std::string status();

// Lets float32 matmuls use TF32 tensor cores (10-bit mantissa products, float32 accumulation):
// several times faster on Ampere and later, at about 1e-3 relative error. Off by default.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Waits for every kernel queued on the backend's stream (for timing; copies to the host already
// wait for the work they depend on).
void synchronize();

}  // namespace qkv::cuda
