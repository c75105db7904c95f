// Deciding whether AMX may be used: cpuid, the environment, then Linux's permission.
#include "engine/cpu/amx.h"

#include <cstdlib>
#include <cstring>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace qkv::cpu {
namespace {

bool request_tile_state() {
#if defined(__linux__) && defined(__x86_64__)
  // From Linux's arch/x86/include/uapi/asm/prctl.h and the XSAVE feature numbering; not every
  // libc's headers carry them yet.
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

bool decide() {
#if defined(__x86_64__)
  const char* env = std::getenv("QKV_CPU_AMX");
  if (env && std::strcmp(env, "0") == 0) return false;
  if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return false;
  // The packing code (gemm_bf16_pack.cpp) uses AVX-512BW and rounds float32 with AVX512-BF16;
  // every CPU with AMX has both.
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512bf16")) return false;
  return request_tile_state();
#else
  return false;
#endif
}

}  // namespace

bool amx_bf16_available() {
  static const bool available = decide();
  return available;
}

}  // namespace qkv::cpu
