// A job in which one rank fails on purpose, for tests/mpi/peer_failure.sh.
//
//   mpi_peer_failure kill|throw VICTIM
//
// Every rank runs allreduces in a loop; at step 5 rank VICTIM either dies at once (SIGKILL, as
// when the kernel's OOM killer or a user ends it) or throws a qkv::Error, which the rank reports
// in one line before ending the whole job. The other ranks are then waiting in a collective that
// cannot complete: the test checks that the job ends anyway, with the victim named.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/process_group.h"

int main(int argc, char** argv) {
  using namespace qkv;
  if (argc != 3 || (std::string(argv[1]) != "kill" && std::string(argv[1]) != "throw")) {
    std::fprintf(stderr, "usage: mpi_peer_failure kill|throw VICTIM\n");
    return 2;
  }
  std::string mode = argv[1];
  int victim = std::atoi(argv[2]);
  std::shared_ptr<ProcessGroup> group = ProcessGroup::from_environment();
  // MPICH's launcher names a dead process by its PID only: this line lets the test map it back.
  std::fprintf(stderr, "mpi_peer_failure: rank %d of %d is pid %d\n", group->rank(), group->size(),
               int(getpid()));
  try {
    for (int step = 0; step < 2000; ++step) {
      if (step == 5 && group->rank() == victim) {
        if (mode == "kill") raise(SIGKILL);
        throw Error("mpi_peer_failure: gave up on purpose at step 5");
      }
      Tensor t = full({1000}, double(group->rank()));
      group->allreduce_sum(t);
      usleep(10000);  // a 20 s job if nothing goes wrong
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv: rank %d of %d: %s\n", group->rank(), group->size(), e.what());
    std::fflush(stderr);
    group->abort(1);
  }
  return 0;
}
