// The thread pool behind parallel_for (engine/parallel.cpp): every chunk of every job runs once,
// also when a job has fewer chunks than there are workers.
//
// A worker with no chunk in a job does not report back, so the caller may publish the next job
// while that worker is still reading the current one. When the chunk count lived in its own
// variable, such a worker could read the next job's count against this job's sequence number and
// run a chunk of the next job twice. The count now travels in the atomic job word itself. With
// the count a separate variable (engine/parallel.cpp at 6ba2c12), this loop, built alone with
// ThreadSanitizer, stops with a data race between the caller's write of the count and a
// chunkless worker's read (the CI runs this suite under TSan); a chunk actually run twice, which
// the counts below assert against without TSan, is much rarer.
#include <array>
#include <atomic>
#include <boost/test/unit_test.hpp>

#include "engine/parallel.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::ThreadCount;

BOOST_AUTO_TEST_SUITE(thread_pool)

BOOST_AUTO_TEST_CASE(each_chunk_runs_once_when_jobs_leave_workers_without_a_chunk) {
  // more threads than this machine's two cores, so workers are often descheduled mid-job
  ThreadCount threads(4);
  std::array<std::atomic<int>, 4> runs{};
  int wrong = 0;
  for (int job = 0; job < 4000; ++job) {
    const int chunks = 1 + job % 4;  // 1 to 4 chunks of one index: the other workers get none
    for (auto& r : runs) r.store(0);
    parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) runs[size_t(i)].fetch_add(1);
    });
    for (int i = 0; i < 4; ++i) wrong += runs[size_t(i)].load() != (i < chunks ? 1 : 0);
  }
  BOOST_TEST(wrong == 0);
}

BOOST_AUTO_TEST_SUITE_END()
