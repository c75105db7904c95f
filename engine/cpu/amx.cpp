// Deciding whether AMX may be used: cpuid, the environment, then Linux's permission.
#include "engine/cpu/amx.h"

#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define QKV_AMX __attribute__((target("amx-tile,amx-bf16")))

namespace qkv::cpu {
namespace {

// The operand of LDTILECFG; its layout is fixed by the instruction.
struct TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

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

// Why AMX is not used, or "" when it is.
const char* decide() {
#if defined(__x86_64__)
  const char* env = std::getenv("QKV_CPU_AMX");
  if (env && std::strcmp(env, "0") == 0) return "turned off by QKV_CPU_AMX=0";
  if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16"))
    return "this CPU has no AMX-BF16";
  // The packing code (gemm_bf16_pack.cpp) uses AVX-512BW and rounds float32 with AVX512-BF16;
  // every CPU with AMX has both.
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512bf16"))
    return "this CPU has AMX but not AVX512-BF16";
  if (!request_tile_state()) return "Linux did not grant the tile state (arch_prctl)";
  return "";
#else
  return "not an x86-64 build";
#endif
}

const char* reason() {
  static const char* const why = decide();
  return why;
}

}  // namespace

bool amx_bf16_available() { return reason()[0] == '\0'; }

const char* amx_bf16_unavailable_reason() { return reason(); }

namespace {

// The tile instructions live in functions of their own: GCC ignores target(...) on the definition
// of a function first declared without it, as amx.h declares the ones below (a build without
// -march=native then fails to compile them).
QKV_AMX void load_tile_config() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  // GCC 12's _tile_loadconfig tells the compiler it reads only 8 bytes at the pointer, so the
  // stores above past the first 8 bytes may be dropped as dead (it happened: LDTILECFG then saw
  // zero rows and the first tile load faulted). The empty asm takes the address and clobbers
  // memory, which forces every store of `config` to happen first.
  asm volatile("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

QKV_AMX void release_tiles() { _tile_release(); }

// TDPBF16PS on zero tiles in registers, four independent accumulators, for about `seconds`.
QKV_AMX double measure_peak_flops(double seconds) {
  using Clock = std::chrono::steady_clock;
  alignas(64) static const uint16_t zeros[16 * 32] = {};
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  constexpr int64_t kRounds = 4096;  // of 4 instructions, ~1 ms
  int64_t rounds = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int64_t i = 0; i < kRounds; ++i) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    rounds += kRounds;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return double(rounds) * 4 * (2.0 * 16 * 16 * 32) / elapsed;
}

}  // namespace

namespace {
thread_local int tile_scope_depth = 0;  // AmxTileScopes alive on this thread
}  // namespace

AmxTileScope::AmxTileScope() {
  if (tile_scope_depth++ == 0) load_tile_config();
}

AmxTileScope::~AmxTileScope() {
  if (--tile_scope_depth == 0) release_tiles();
}

double amx_bf16_peak_flops(double seconds) {
  AmxTileScope tiles;
  return measure_peak_flops(seconds);
}

}  // namespace qkv::cpu
