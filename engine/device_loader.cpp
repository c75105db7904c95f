// dlopen()s a backend's shared library once and calls its entry point (engine/device_loader.h).
#include "engine/device_loader.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>

#include "engine/backend.h"

namespace qkv {

namespace {

struct Loaded {
  void* handle = nullptr;
  bool registered = false;
  std::string status;
};

// The folder of the running executable ("" when /proc/self/exe cannot be read).
std::string executable_dir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "";
  const std::string exe(path, size_t(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "." : exe.substr(0, slash);
}

// Why a library could not be mapped, when an address-space limit is the likely cause: the CUDA
// backend links cuBLAS, whose libraries alone reserve about 720 MB when they are mapped, so the
// backend cannot even be asked whether a GPU is there under a lower `ulimit -v`. "" without a
// limit.
std::string address_space_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return "";
  return "the address space is limited to " + std::to_string(limit.rlim_cur / 1024) +
         " KiB (ulimit -v), less than the CUDA libraries map; a CPU run needs none of them";
}

Loaded load_cuda() {
  const char* from_env = std::getenv("QKV_CUDA_LIBRARY");
  const bool named = from_env != nullptr && *from_env != '\0';
  const std::string path = named ? std::string(from_env) : executable_dir() + "/libqkv_cuda.so";
  if (access(path.c_str(), F_OK) != 0) {
    if (named) return {nullptr, false, "unavailable: QKV_CUDA_LIBRARY=" + path + " does not exist"};
    return {nullptr, false,
            "unavailable: " + path +
                " not found (built by `cmake --build build --target qkv_cuda` when nvcc was found "
                "at configure time; QKV_CUDA_LIBRARY names another copy)"};
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    const std::string why = error != nullptr ? error : "unknown dlopen error";
    // The library takes the engine from the executable; one that does not export it cannot load
    // the library.
    std::string hint;
    if (why.find("undefined symbol") != std::string::npos)
      hint = " (this executable does not export the engine: qkv_loads_backends in CMakeLists.txt)";
    else if (const std::string limit = address_space_limit();
             !limit.empty() && (why.find("failed to map") != std::string::npos ||
                                why.find("annot allocate memory") != std::string::npos))
      hint = " (" + limit + ")";
    return {nullptr, false, "unavailable: cannot load " + path + ": " + why + hint};
  }
  auto init = reinterpret_cast<QkvBackendInit>(dlsym(handle, QKV_BACKEND_INIT_SYMBOL));
  if (init == nullptr)
    return {handle, false,
            "unavailable: " + path + " has no " QKV_BACKEND_INIT_SYMBOL "() (not a qkv backend)"};
  std::array<char, 512> status{};
  const bool registered = init(status.data(), status.size()) != 0;
  return {handle, registered && has_backend(DeviceKind::cuda), status.data()};
}

// A backend already registered in-process (a test linked against it) wins over the library.
Loaded& cuda() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] {
    if (has_backend(DeviceKind::cuda))
      loaded = {nullptr, true, "registered in-process"};
    else
      loaded = load_cuda();
  });
  return loaded;
}

}  // namespace

bool ensure_backend(DeviceKind kind) {
  if (kind == DeviceKind::cpu) return true;
  return cuda().registered;
}

std::string backend_status(DeviceKind kind) {
  if (kind == DeviceKind::cpu) return "available";
  return cuda().status;
}

void* backend_library_symbol(DeviceKind kind, const char* name) {
  if (kind == DeviceKind::cpu) return nullptr;
  const Loaded& loaded = cuda();
  if (!loaded.registered || loaded.handle == nullptr) return nullptr;
  return dlsym(loaded.handle, name);
}

}  // namespace qkv
