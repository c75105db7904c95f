#include "train/trainer/interrupt.h"

#include <signal.h>

#include <csignal>

namespace qkv::train {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
int g_joined_signal = 0;  // another rank's stop signal, which this rank follows
void on_stop_signal(int signal) {
  // A second signal means "now": the default action ends the process, and the last checkpoint
  // (switched whole, train/checkpoint_dir.h) is what a resume continues from.
  if (g_stop_signal != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_stop_signal = signal;
}
}  // namespace

void install_interrupt_handler() {
  // Without SA_RESTART: a write blocked on a terminal or pipe that nobody reads any more returns
  // (EINTR) when the signal arrives instead of blocking again, so the loop reaches its
  // checkpoint. Open MPI's mpirun stops reading its ranks' output once it is told to stop and
  // only then passes the signal on: a rank printing progress meanwhile fills the pipe and waits.
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &action, nullptr);
}
bool interrupt_requested() { return g_stop_signal != 0; }
int interrupt_signal() { return g_stop_signal != 0 ? g_stop_signal : g_joined_signal; }
void join_interrupt(int signal) {
  if (g_stop_signal == 0) g_joined_signal = signal;
}

std::string interruption_message(int64_t step, const std::string& run) {
  const int s = interrupt_signal();
  const std::string name = s == SIGINT    ? "SIGINT (Ctrl-C)"
                           : s == SIGTERM ? "SIGTERM"
                           : s == SIGHUP  ? "SIGHUP"
                                          : "signal " + std::to_string(s);
  return "interrupted by " + name + ": the checkpoint of step " + std::to_string(step) + " is in " +
         run + "; continue with --resume " + run;
}

}  // namespace qkv::train
