#include "train/trainer/rank_run_dir.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

namespace qkv::train {

void report_rank_failure(const ProcessGroup& group, const std::string& what) {
  std::fprintf(stderr, "qkv: rank %d of %d: %s\n", group.rank(), group.size(), what.c_str());
  std::fflush(stderr);
}

RankRunDir::RankRunDir(const std::string& out, RunMode mode, ProcessGroup& group) : out_(out) {
  if (group.rank() == 0) {
    run_ = std::make_unique<RunDir>(out, mode);
    group.barrier();
    return;
  }
  group.barrier();  // a refusal at rank 0 ends the job here
  if (!std::freopen("/dev/null", "w", stdout))
    std::fprintf(stderr, "rank %d: cannot silence stdout\n", group.rank());
  scratch_ = (std::filesystem::temp_directory_path() /
              ("qkv-rank" + std::to_string(group.rank()) + "-" + std::to_string(getpid())))
                 .string();
  std::filesystem::remove_all(scratch_);
  run_ = std::make_unique<RunDir>(scratch_, RunMode::fresh);
}

RankRunDir::~RankRunDir() {
  run_.reset();
  if (!scratch_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_, ignored);
  }
}

}  // namespace qkv::train
