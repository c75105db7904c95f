// Stopping a run on a signal. SIGINT (Ctrl-C), SIGTERM (kill, timeout, batch schedulers) and
// SIGHUP (a closed terminal) ask the training loop to write a checkpoint and return (the handler
// only records the signal); a second signal ends the process at once. The command line then exits
// with 128 + the signal. Once a stop is pending the trainer writes its files (log.txt, the
// checkpoint) before anything on the terminal, and no progress: whoever reads the terminal may
// have stopped reading (mpirun does), and a write to it can block until the process is killed.
#pragma once

#include <cstdint>
#include <string>

namespace qkv::train {

void install_interrupt_handler();
bool interrupt_requested();
int interrupt_signal();  // the signal received (or joined), 0 if none: a stop is pending
// Under mpirun a signal reaches the ranks at different moments; they agree on it once per step,
// and a rank that has not received one itself stops as if it had received `signal`.
void join_interrupt(int signal);
// "interrupted by SIGTERM: the checkpoint of step 12 is in runs/x; continue with --resume runs/x"
std::string interruption_message(int64_t step, const std::string& run);

}  // namespace qkv::train
