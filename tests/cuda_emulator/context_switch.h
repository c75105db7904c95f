// Moving the CPU from one stack to another: the emulator's fibers (emulator.cpp).
//
// glibc's swapcontext also saves and restores the signal mask, a system call each way, which
// the emulator cannot afford: a barrier in a block of 512 threads is 1024 switches.
// On x86-64 a switch here is a dozen instructions (context_switch.cpp); elsewhere it falls back
// to ucontext.
#pragma once

#include <cstddef>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace qkv::cuda_emulator {

struct MachineContext {
#if defined(__x86_64__)
  void* stack_pointer = nullptr;  // where the callee-saved registers were pushed
#else
  ucontext_t context;
#endif
};

// Makes `context` start `entry` on the given stack at its first switch. entry must never return.
void prepare_context(MachineContext& context, void* stack, size_t stack_bytes, void (*entry)());

// Saves the running context in `from` and continues `to` where it last switched away (or at its
// entry). Returns when something switches back to `from`.
void switch_context(MachineContext& from, MachineContext& to);

}  // namespace qkv::cuda_emulator
