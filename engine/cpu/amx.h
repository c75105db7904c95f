// Intel AMX (Advanced Matrix Extensions), as far as qkv uses it: whether this process may run its
// bfloat16 tile instructions.
//
// AMX adds eight tile registers of up to 16 rows x 64 bytes and TDPBF16PS, which multiplies a
// 16 x 32 bfloat16 tile by a 32 x 16 one into a 16 x 16 float32 tile: 8192 multiply-adds per
// instruction, 16 times what an AVX-512 FMA does on float32. Linux keeps the 8 KiB of tile state
// out of a thread's saved context until the process asks for it (arch_prctl
// ARCH_REQ_XCOMP_PERM); until then the first tile instruction kills the process with SIGILL. So
// qkv asks once, and uses AMX only if the CPU has it and the kernel said yes.
#pragma once

namespace qkv::cpu {

// True when the CPU has AMX-TILE and AMX-BF16, Linux granted this process the tile state, and
// the environment variable QKV_CPU_AMX is not "0" (set it to compare with the float32 path, or
// to rule AMX out when chasing a bug). Decided on the first call; cheap afterwards.
bool amx_bf16_available();
// Why not, in a few words ("" when available): for `qkv info` and the benchmarks.
const char* amx_bf16_unavailable_reason();

// Configures this thread's tiles the one way qkv uses them, all eight 16 rows x 64 bytes (16
// float32 or 32 bfloat16 per row), and releases them at the end of the scope: released tiles make
// the thread's saved context 8 KiB smaller at every context switch. Scopes nest: only the
// outermost one on a thread configures and releases (so a batch of small products configures
// once, not once per product). Only when amx_bf16_available().
class AmxTileScope {
 public:
  AmxTileScope();
  ~AmxTileScope();
  AmxTileScope(const AmxTileScope&) = delete;
  AmxTileScope& operator=(const AmxTileScope&) = delete;
};

// Peak bfloat16 throughput of one core, measured: TDPBF16PS on tiles already in registers, four
// independent accumulators, for about `seconds`. FLOP/s (a multiply-add counts 2). The yardstick
// `qkv bench gemm` divides by.
double amx_bf16_peak_flops(double seconds);

}  // namespace qkv::cpu
