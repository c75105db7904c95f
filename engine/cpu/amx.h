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

}  // namespace qkv::cpu
