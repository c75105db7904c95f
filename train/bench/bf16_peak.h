// The peak of the bfloat16 instruction a --precision bf16 run multiplies with, measured, so that
// a bf16 step's MFU can also be read against what its products could reach: VDPBF16PS does twice
// an FMA's multiply-adds, and TDPBF16PS far more, so the float32 FMA peak alone flatters a bf16
// step.
#pragma once

namespace qkv::bench {

// The instruction of cpu::bf16_kernel()'s kernel ("TDPBF16PS" or "VDPBF16PS"), or "" where there
// is none (bfloat16 products then run on the float32 FMA).
const char* bf16_peak_instruction();

// Its FLOP/s summed over `threads` threads (the qkv pool) running it at once on registers, each
// the best of `windows` 1 ms windows (on a shared machine a window can only read low); 0 where
// bf16_peak_instruction() is "". A multiply-add counts 2.
double measured_bf16_peak_gflops(int threads, int windows = 20);

}  // namespace qkv::bench
