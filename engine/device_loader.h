// Backends that live in shared libraries, loaded the first time their device is asked for.
//
// The CUDA backend is libqkv_cuda.so, the only part of qkv that links the CUDA runtime and cuBLAS:
// a CPU-only run never maps them. backend_for(Device::cuda()) (--device cuda) and
// backend_status (qkv info) load it: from $QKV_CUDA_LIBRARY when set, else from the folder of the
// running executable. The library resolves the engine's symbols against the executable, which
// therefore exports them (CMake: qkv_loads_backends).
#pragma once

#include <cstddef>
#include <string>

#include "engine/device.h"

// The entry point every backend library exports: probes its device and, when it is usable,
// registers its backend with register_backend. Writes one line to `status` (the device's name
// and size, or why it is unavailable) and returns 1 when the backend was registered, else 0.
extern "C" {
using QkvBackendInit = int (*)(char* status, size_t status_size);
}
#define QKV_BACKEND_INIT_SYMBOL "qkv_backend_init"

namespace qkv {

// Loads and registers the backend of `kind` on the first call (later calls return the first
// answer). True when the backend is registered; never throws: a missing library, driver or device
// is reported by backend_status. Always true for the CPU.
bool ensure_backend(DeviceKind kind);

// One line about the device's backend: "NVIDIA H200, 139 GiB, compute capability 9.0", or
// "unavailable: " and why (library not found or not loadable, no driver, no device). Loads the
// backend's library if that has not been tried yet.
std::string backend_status(DeviceKind kind);

// A function the loaded library of `kind` exports by this name (extern "C"), or nullptr when the
// backend is unavailable or has no such function: for what the Backend interface does not cover,
// such as the CUDA benchmarks.
void* backend_library_symbol(DeviceKind kind, const char* name);

}  // namespace qkv
