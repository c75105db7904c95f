#include "engine/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "engine/profiler.h"
#include "engine/spin_wait.h"

namespace qkv {
namespace {

thread_local bool t_in_parallel = false;

constexpr int kMaxThreads = 1024;

// QKV_NUM_THREADS when set: a whole number in 1..kMaxThreads, anything else ("abc", "2x", "-3", a
// million threads the system cannot start) is refused rather than ignored.
int default_threads() {
  if (const char* env = std::getenv("QKV_NUM_THREADS")) {
    const std::string text = env;
    const bool digits = !text.empty() && text.size() <= 4 &&
                        text.find_first_not_of("0123456789") == std::string::npos;
    const int n = digits ? std::stoi(text) : 0;
    if (n < 1 || n > kMaxThreads)
      throw Error("QKV_NUM_THREADS: expected a whole number in 1.." + std::to_string(kMaxThreads) +
                  ", got '" + text + "'");
    return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// A fixed set of workers. One job runs at a time (kernels are issued from one thread; nested calls
// run inline), so the pool needs no queue: a job is published by storing a new `job_` word, its
// sequence number above kCountBits and its chunk count below, read by a worker in one atomic
// load. A worker with no chunk in a job does not report back, so the caller may publish the next
// job while that worker is still looking at this one: were the count a separate variable, it
// could read the next job's count against this job's sequence number (a race ThreadSanitizer
// found) and run a chunk of the next job twice.
class ThreadPool {
 public:
  ~ThreadPool() { resize(0); }

  void resize(int workers) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
    // Each worker starts from the current job, read here rather than on the new thread: a job
    // issued before the thread first runs must still count as new to it.
    const uint64_t start = job_.load();
    for (int i = 0; i < workers; ++i)
      threads_.emplace_back([this, i, start] { worker_loop(i + 1, start); });
  }

  int workers() const { return int(threads_.size()); }

  // Runs task(i) for i in [0, count) with the caller doing task(0).
  void run(int count, const std::function<void(int)>& task) {
    std::lock_guard run_lock(run_mutex_);
    {
      std::lock_guard lock(mutex_);
      task_ = &task;
      error_ = nullptr;
      pending_.store(count - 1);
      const uint64_t sequence = (job_.load() >> kCountBits) + 1;
      job_.store(sequence << kCountBits | uint64_t(count));
    }
    wake_.notify_all();
    run_chunk(0);
    // The workers spin between kernels (engine/spin_wait.h) and so does the issuing thread while
    // they finish, then both sleep: a program that stops issuing work stops using the cores.
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [this] { return pending_.load() == 0; });
    }
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Chunk 0 is the issuing thread's, inside the op's own event; a worker's chunk is an event of
  // its own track when profiling (engine/profiler.h).
  void run_chunk(int i) {
    t_in_parallel = true;
    const int64_t profiled_since = i > 0 && profiling() ? profile_hooks::now_ns() : -1;
    try {
      (*task_)(i);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (profiled_since >= 0) profile_hooks::chunk_finished(i, profiled_since);
    t_in_parallel = false;
  }

  void worker_loop(int id, uint64_t seen) {
    for (;;) {
      uint64_t now = seen;
      const bool woken = spin_until([&] {
        now = job_.load(std::memory_order_acquire);
        return now != seen || stop_.load();
      });
      if (!woken) {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_.load() || job_.load() != seen; });
        now = job_.load();
      }
      if (stop_.load()) return;
      seen = now;
      if (id >= int(now & kCountMask)) continue;  // this job's count, not a later one's
      run_chunk(id);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mutex_);  // pairs with the caller's predicate check
        done_.notify_one();
      }
    }
  }

  std::mutex run_mutex_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  static constexpr int kCountBits = 16;  // chunks per job: at most kMaxThreads
  static constexpr uint64_t kCountMask = (uint64_t(1) << kCountBits) - 1;
  static_assert(kMaxThreads <= kCountMask);
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> job_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

std::atomic<int> g_threads{0};

ThreadPool& pool() {
  static ThreadPool p;
  return p;
}

}  // namespace

int num_threads() {
  int n = g_threads.load();
  if (n == 0) {
    n = default_threads();
    g_threads = n;
  }
  return n;
}

void set_num_threads(int n) { g_threads = std::max(1, n); }

bool in_parallel_region() { return t_in_parallel; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  if (chunks <= 1 || t_in_parallel) {
    fn(begin, end);
    return;
  }
  ThreadPool& p = pool();
  static std::mutex resize_mutex;
  {
    std::lock_guard lock(resize_mutex);
    if (p.workers() != num_threads() - 1) p.resize(num_threads() - 1);
  }
  int64_t per = (n + chunks - 1) / chunks;
  p.run(int(chunks), [&](int i) {
    int64_t b = begin + i * per, e = std::min(end, b + per);
    if (b < e) fn(b, e);
  });
}

void parallel_for_each_range(
    const std::vector<int64_t>& sizes, int64_t grain,
    const std::function<void(int chunk, size_t index, int64_t begin, int64_t end)>& fn) {
  grain = std::max<int64_t>(grain, 1);
  const int64_t threads = num_threads();
  // parallel_for's split of [0, n): chunks of `per`, chunk t starting at t * per.
  auto chunks_of = [&](int64_t n) { return std::min<int64_t>(threads, (n + grain - 1) / grain); };
  int64_t most_chunks = 1;
  for (int64_t n : sizes) most_chunks = std::max(most_chunks, chunks_of(n));
  auto run_chunk = [&](int64_t t) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i], chunks = std::max<int64_t>(chunks_of(n), 1);
      const int64_t per = (n + chunks - 1) / chunks, b = t * per, e = std::min(n, b + per);
      if (b < e) fn(int(t), i, b, e);
    }
  };
  if (most_chunks <= 1 || t_in_parallel) {
    for (int64_t t = 0; t < most_chunks; ++t) run_chunk(t);
    return;
  }
  // One chunk of size 1 per thread: parallel_for gives chunk t to the pool's thread t.
  parallel_for(0, most_chunks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) run_chunk(t);
  });
}

}  // namespace qkv
