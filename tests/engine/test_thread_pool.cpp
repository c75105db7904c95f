// The thread pool behind parallel_for (engine/parallel.cpp): every chunk of every job runs once,
// also when a job has fewer chunks than there are workers; its threads wait between jobs by
// spinning for a time, then sleeping (engine/spin_wait.h).
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
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/parallel.h"
#include "engine/spin_wait.h"
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

// parallel_for_each_range gives chunk t of every range to the thread parallel_for gives chunk t of
// that range alone, with the same bounds: what lets clip_grad_norm_'s kernels and Adam's step touch
// the part of each gradient the same thread touched before. Ranges of one chunk, of a ragged split
// and of more chunks than another range has, at 2 and 3 threads.
BOOST_AUTO_TEST_CASE(each_range_is_split_as_parallel_for_splits_it_on_the_same_threads) {
  const std::vector<int64_t> sizes = {100, 8192, 10001, 0, 4097, 70000};
  const int64_t grain = 4096;
  for (int threads : {2, 3}) {
    ThreadCount count(threads);
    using Run = std::pair<int64_t, int64_t>;  // a chunk's [begin, end)
    std::mutex mutex;
    // Every run of a range's chunk with its thread, from parallel_for over the range alone...
    std::map<Run, std::thread::id> alone;
    for (int64_t n : sizes)
      for (int repeat = 0; repeat < 2; ++repeat)  // a second pass: the pool's threads are settled
        parallel_for(0, n, grain, [&](int64_t b, int64_t e) {
          std::lock_guard lock(mutex);
          alone[{n * 1000000 + b, e}] = std::this_thread::get_id();
        });
    // ...and from one job over all of them.
    std::map<Run, std::thread::id> together;
    int wrong_chunk = 0;
    parallel_for_each_range(sizes, grain, [&](int chunk, size_t i, int64_t b, int64_t e) {
      std::lock_guard lock(mutex);
      const int64_t chunks = std::min<int64_t>(threads, (sizes[i] + grain - 1) / grain);
      wrong_chunk += b != chunk * ((sizes[i] + chunks - 1) / chunks);
      together[{sizes[i] * 1000000 + b, e}] = std::this_thread::get_id();
    });
    BOOST_TEST(wrong_chunk == 0);
    BOOST_TEST(together.size() == alone.size(), threads << " threads");
    for (const auto& [run, thread] : alone) {
      const auto found = together.find(run);
      BOOST_TEST_REQUIRE((found != together.end()), "range " << run.first / 1000000 << " ["
                                                             << run.first % 1000000 << ", "
                                                             << run.second << ") missing");
      BOOST_TEST((found->second == thread), "range " << run.first / 1000000 << " chunk at "
                                                     << run.first % 1000000 << ": another thread");
    }
  }
}

// The wait between kernels (engine/spin_wait.h): spinning ends the moment the condition holds, and
// gives up no sooner than its time, however long a `pause` takes on this CPU. Counting 2000
// pauses instead, as the pool did, gave up after 22 us on one CPU measured and 37 on another.
BOOST_AUTO_TEST_CASE(a_spin_ends_when_its_condition_holds_and_lasts_its_time_otherwise) {
  int calls = 0;
  BOOST_TEST(spin_until([&] { return ++calls == 5; }));
  BOOST_TEST(calls == 5);

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  BOOST_TEST(!spin_until([] { return false; }));
  const auto spun = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - start);
  BOOST_TEST(spun.count() >= kSpinTime.count(), "gave up after " << spun.count() << " us");
}

// A pool with nothing to do sleeps: its threads spin for kSpinTime after a job, then block, so
// the process uses next to no processor time while the caller waits 50 ms. A spin that never gave
// up would use 50 ms per thread.
BOOST_AUTO_TEST_CASE(idle_threads_sleep_instead_of_spinning) {
  ThreadCount threads(2);
  std::atomic<int> sum{0};
  parallel_for(0, 2, 1, [&](int64_t b, int64_t e) { sum += int(e - b); });
  BOOST_TEST(sum.load() == 2);
  auto cpu_ms = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
  };
  const double before = cpu_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double used = cpu_ms() - before;
  BOOST_TEST(used < 25.0, "the process used " << used << " ms of processor time in 50 ms idle");
}

BOOST_AUTO_TEST_SUITE_END()
