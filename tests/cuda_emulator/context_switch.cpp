// The context switch of context_switch.h.
#include "tests/cuda_emulator/context_switch.h"

#include <cstdint>
#include <cstring>

namespace qkv::cuda_emulator {

#if defined(__x86_64__)

// qkv_emulator_switch(from, to): pushes the registers the System V ABI makes the callee keep
// (rbp, rbx, r12-r15, and the SSE and x87 control words), stores the stack pointer in *from,
// loads `to`, and pops the same set from the other stack. The `ret` then continues wherever that
// context called qkv_emulator_switch, or, for a fresh one, at its entry (prepare_context).
extern "C" void qkv_emulator_switch(void** from, void* to);
asm(R"(
  .text
  .globl qkv_emulator_switch
  .type qkv_emulator_switch, @function
qkv_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size qkv_emulator_switch, .-qkv_emulator_switch
)");

void prepare_context(MachineContext& context, void* stack, size_t stack_bytes, void (*entry)()) {
  // From the top of the stack down, what the switch pops for a fresh context: a null return
  // address for entry (it never returns; it sits where entry expects its caller's, keeping the
  // ABI's 16-byte alignment), entry itself as the switch's return address, six zero registers,
  // and the control words a new thread starts with.
  auto top = (reinterpret_cast<uintptr_t>(stack) + stack_bytes) & ~uintptr_t(15);
  auto* slot = reinterpret_cast<uint64_t*>(top);
  *--slot = 0;
  *--slot = reinterpret_cast<uint64_t>(entry);
  for (int i = 0; i < 6; ++i) *--slot = 0;
  const uint32_t mxcsr = 0x1f80;  // all exceptions masked, round to nearest
  const uint16_t fpu_control = 0x037f;
  *--slot = 0;
  std::memcpy(slot, &mxcsr, sizeof mxcsr);
  std::memcpy(reinterpret_cast<unsigned char*>(slot) + 4, &fpu_control, sizeof fpu_control);
  context.stack_pointer = slot;
}

void switch_context(MachineContext& from, MachineContext& to) {
  qkv_emulator_switch(&from.stack_pointer, to.stack_pointer);
}

#else

void prepare_context(MachineContext& context, void* stack, size_t stack_bytes, void (*entry)()) {
  getcontext(&context.context);
  context.context.uc_stack.ss_sp = stack;
  context.context.uc_stack.ss_size = stack_bytes;
  context.context.uc_link = nullptr;
  makecontext(&context.context, entry, 0);
}

void switch_context(MachineContext& from, MachineContext& to) {
  swapcontext(&from.context, &to.context);
}

#endif

}  // namespace qkv::cuda_emulator
