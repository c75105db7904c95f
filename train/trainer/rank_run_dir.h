// The run folder as the ranks of `mpirun -np N qkv train ...` see it. Rank 0 alone writes the
// run folder (--out) and holds its lock; every other rank runs the same code against a scratch
// folder of its own in the system's temporary directory, removed when the run ends, and prints
// nothing on stdout (its errors still go to stderr). A plain `qkv train` is rank 0 of 1.
#pragma once

#include <exception>
#include <memory>
#include <string>

#include "engine/process_group.h"
#include "train/run_dir.h"

namespace qkv::train {

// "qkv: rank 1 of 2: <what>" on stderr.
void report_rank_failure(const ProcessGroup& group, const std::string& what);

// Runs `body` (a whole training run). When this process is one of several ranks, an error it
// throws is printed as one line naming the rank ("qkv: rank 1 of 2: ...") and ends every rank of
// the job (ProcessGroup::abort): returning would leave the others waiting in their next
// collective. A single process rethrows.
template <typename Body>
auto run_on_this_rank(Body&& body) -> decltype(body()) {
  ProcessGroup& group = *ProcessGroup::from_environment();
  if (group.size() == 1) return body();
  try {
    return body();
  } catch (const std::exception& e) {
    report_rank_failure(group, e.what());
    group.abort(1);
    throw;  // not reached: abort() ends the process
  }
}

class RankRunDir {
 public:
  // Rank 0 opens `out` with `mode` (refusals and repairs as RunDir's) before any other rank opens
  // its scratch folder: a refused folder ends the job before the others start working.
  RankRunDir(const std::string& out, RunMode mode, ProcessGroup& group);
  ~RankRunDir();
  RankRunDir(const RankRunDir&) = delete;
  RankRunDir& operator=(const RankRunDir&) = delete;

  RunDir& run() { return *run_; }
  // The folder a resumed run reads its checkpoint and files from: --out on every rank.
  const std::string& source() const { return out_; }

 private:
  std::string out_, scratch_;
  std::unique_ptr<RunDir> run_;
};

}  // namespace qkv::train
