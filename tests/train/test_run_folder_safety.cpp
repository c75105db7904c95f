// What keeps a run folder whole: one writer at a time (the lock), a folder holding a run is never
// trained over unasked, the checkpoint is switched as one unit (a failed or killed write leaves
// the previous one current, a reader never sees two checkpoints mixed), the temporaries of killed
// writers are removed, and a torn last line of metrics.jsonl does not break a resume.
// (kill -9 and signals on the real command line: tests/cli/kill_resume.sh.)
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/error.h"
#include "tests/train/helpers.h"
#include "tests/train/tiny_runs.h"
#include "train/atomic_file.h"
#include "train/checkpoint_dir.h"
#include "train/run_dir.h"
#include "train/run_lock.h"
#include "train/trainer/checkpoint.h"
#include "train/trainer/classification_trainer.h"
#include "train/trainer/interrupt.h"
#include "train/trainer/translation_trainer.h"

using namespace qkv;
using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;
using qkv::train::test::SimulatedFullDisk;
namespace fs = std::filesystem;

namespace {

// The shared tiny copy run, evaluated (and checkpointed) every two steps.
Config tiny_copy(const std::string& out, int64_t steps) {
  Config c = test::tiny_copy(out, steps);
  c.eval_every = 2;
  return c;
}

std::vector<std::string> entries(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

size_t lines_of(const std::string& path) {
  const std::string text = read_file(path);
  return size_t(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(run_folder_safety)

BOOST_AUTO_TEST_CASE(one_writer_at_a_time) {
  ScratchDir dir("lock");
  const std::string pid = "pid " + std::to_string(::getpid());
  {
    RunDir first(dir.file("r"));
    BOOST_CHECK_EXCEPTION(RunDir(dir.file("r"), RunMode::resume), Error,
                          message_has("--resume: ", "/r is in use by another qkv process", pid));
    BOOST_CHECK_EXCEPTION(RunDir(dir.file("r"), RunMode::overwrite), Error,
                          message_has("--out: ", "in use by another qkv process", pid));
    BOOST_CHECK_EXCEPTION(RunFolderLock(dir.file("r"), "--run"), Error,
                          message_has("--run: ", "in use by another qkv process", pid));
  }
  // The kernel drops the lock with its descriptor: the folder takes a writer again.
  BOOST_CHECK_NO_THROW(RunDir(dir.file("r"), RunMode::resume));
}

BOOST_AUTO_TEST_CASE(a_finished_run_is_not_trained_over) {
  ScratchDir dir("finished");
  const Config c = tiny_copy(dir.file("run"), 2);
  train_translation(c);
  const std::string model = read_file(c.out + "/model.safetensors");
  const size_t logged = lines_of(c.out + "/metrics.jsonl");
  Config again = c;
  again.steps = 4;
  BOOST_CHECK_EXCEPTION(
      train_translation(again), Error,
      message_has("--out: " + c.out +
                      " already holds files of a run (best.safetensors, checkpoint, config.json, ",
                  "model.safetensors", "--resume " + c.out, "--overwrite"));
  BOOST_CHECK(read_file(c.out + "/model.safetensors") == model);
  BOOST_CHECK_EQUAL(lines_of(c.out + "/metrics.jsonl"), logged);

  // A folder of the user's own files is a fine --out, until one of them has a name a run writes.
  fs::create_directories(dir.file("mine"));
  write_file_atomic(dir.file("mine/notes.txt"), "notes");
  BOOST_CHECK_NO_THROW(RunDir(dir.file("mine")));
  write_file_atomic(dir.file("mine/config.json"), "{\"mine\": 1}");
  fs::remove(dir.file("mine/qkv.lock"));
  BOOST_CHECK_EXCEPTION(RunDir(dir.file("mine")), Error,
                        message_has("already holds files of a run (config.json)"));
  BOOST_CHECK(!fs::exists(dir.file("mine/qkv.lock")));  // refused before anything was made
  BOOST_CHECK(read_file(dir.file("mine/config.json")) == "{\"mine\": 1}");

  // --overwrite: the new run alone in metrics.jsonl, its checkpoint the only one, notes kept.
  write_file_atomic(c.out + "/notes.txt", "mine");
  fs::create_directories(c.out + "/attention");
  write_file_atomic(c.out + "/attention/encoder.0.self.png", "old picture");
  write_file_atomic(c.out + "/attention/mine.txt", "mine");
  TrainResult r = train_translation(again, RunMode::overwrite);
  BOOST_CHECK_EQUAL(r.steps, 4);
  BOOST_CHECK_EQUAL(lines_of(c.out + "/metrics.jsonl"), 4u + 2u + 1u);  // steps, evals, test
  BOOST_CHECK_EQUAL(read_file(c.out + "/notes.txt"), "mine");
  BOOST_CHECK_EQUAL(read_file(c.out + "/attention/mine.txt"), "mine");
  BOOST_CHECK(!fs::exists(c.out + "/attention/encoder.0.self.png"));
  auto state = nlohmann::json::parse(read_file(c.out + "/trainer_state.json"));
  BOOST_CHECK_EQUAL(state["step"].get<int64_t>(), 4);
}

BOOST_AUTO_TEST_CASE(the_list_of_run_files_covers_what_runs_write) {
  // Everything a translation run and a classification run (pictures on) leave at the top of their
  // folders is a name --out refuses and --overwrite removes.
  ScratchDir dir("names");
  Config t = tiny_copy(dir.file("translate"), 2);
  t.pictures = true;
  train_translation(t);
  Config k = t;
  k.task = "order", k.out = dir.file("classify"), k.min_length = 8, k.max_length = 16;
  train_classification(k);
  for (const auto& run : {t.out, k.out}) {
    const auto names = entries(run);
    BOOST_CHECK_GT(names.size(), 10u);
    for (const auto& name : names)
      BOOST_CHECK_MESSAGE(name == kLockFile || is_run_file_name(name),
                          run << "/" << name << " is not in is_run_file_name's list");
  }
  BOOST_CHECK(is_run_file_name("se_block2.png"));
  BOOST_CHECK(is_run_file_name("cbam_block10.png"));
  BOOST_CHECK(is_run_file_name("checkpoint.000000120"));
  BOOST_CHECK(!is_run_file_name("se_block.png"));
  BOOST_CHECK(!is_run_file_name("notes.txt"));
  BOOST_CHECK(!is_run_file_name(kLockFile));
}

BOOST_AUTO_TEST_CASE(a_checkpoint_is_switched_whole) {
  ScratchDir dir("switch");
  const std::string r = dir.path.string();
  write_checkpoint(r, 1, {{"a", "a1"}, {"b", "b1"}});
  write_checkpoint(r, 2, {{"a", "a2"}, {"b", "b2"}});
  BOOST_CHECK_EQUAL(read_file(dir.file("a")), "a2");
  BOOST_CHECK_EQUAL(read_file(dir.file("b")), "b2");
  BOOST_CHECK(fs::read_symlink(dir.file("checkpoint")) == "checkpoint.000000002");
  BOOST_CHECK(
      (entries(r) == std::vector<std::string>{"a", "b", "checkpoint", "checkpoint.000000002"}));
  // The second file does not fit: the new checkpoint's partial folder goes, the old one stays.
  {
    SimulatedFullDisk full(3);
    BOOST_CHECK_EXCEPTION(write_checkpoint(r, 3, {{"a", "a3"}, {"b", "b3 does not fit"}}), Error,
                          message_has("cannot write", "checkpoint.000000003/b"));
  }
  BOOST_CHECK_EQUAL(read_file(dir.file("a")), "a2");
  BOOST_CHECK_EQUAL(read_file(dir.file("b")), "b2");
  BOOST_CHECK(
      (entries(r) == std::vector<std::string>{"a", "b", "checkpoint", "checkpoint.000000002"}));
  BOOST_CHECK_THROW(write_checkpoint(r, 2, {{"a", "x"}, {"b", "x"}}), Error);  // not twice
  BOOST_CHECK_EQUAL(read_file(dir.file("a")), "a2");
}

BOOST_AUTO_TEST_CASE(a_reader_never_sees_two_checkpoints_mixed) {
  // Files written one rename each could be read as a new `a` beside an old `b`. A reader holding
  // the read lock, reading through the names, must always find both from the same step.
  ScratchDir dir("readers");
  const std::string r = dir.path.string();
  write_checkpoint(r, 0, {{"a", "0"}, {"b", "0"}});
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, mixed{0}, failed{0};
  std::thread reader([&] {
    while (!done) {
      try {
        const CheckpointLock lock(r, CheckpointLock::read);
        const std::string a = read_file(dir.file("a")), b = read_file(dir.file("b"));
        mixed += a != b;
      } catch (const Error&) {  // a file removed between the link's switch and its opening
        ++failed;
      }
      ++reads;
    }
  });
  for (int step = 1; step <= 300; ++step) {
    const std::string s = std::to_string(step);
    write_checkpoint(r, step, {{"a", s}, {"b", s}});
  }
  done = true;
  reader.join();
  BOOST_TEST_MESSAGE(reads << " reads during 300 checkpoint switches");
  BOOST_CHECK_GT(reads.load(), 0);
  BOOST_CHECK_EQUAL(mixed.load(), 0);
  BOOST_CHECK_EQUAL(failed.load(), 0);
}

BOOST_AUTO_TEST_CASE(a_plain_checkpoint_of_an_older_run_folder_is_adopted) {
  ScratchDir dir("adopt");
  const std::string r = dir.path.string();
  write_file_atomic(dir.file("a"), "old a");
  write_file_atomic(dir.file("b"), "old b");
  write_checkpoint(r, 7, {{"a", "new a"}, {"b", "new b"}});
  BOOST_CHECK_EQUAL(read_file(dir.file("a")), "new a");
  BOOST_CHECK(fs::is_symlink(dir.file("b")));
  BOOST_CHECK(
      (entries(r) == std::vector<std::string>{"a", "b", "checkpoint", "checkpoint.000000007"}));
}

BOOST_AUTO_TEST_CASE(a_copy_that_followed_the_links_resumes) {
  // scp -r and cp -L copy what the links name: `checkpoint` becomes a plain folder, and
  // model.safetensors etc. plain files. Such a copy still evaluates and resumes.
  ScratchDir dir("copied");
  const Config c = tiny_copy(dir.file("run"), 2);
  train_translation(c);
  fs::copy(c.out, dir.file("copy"), fs::copy_options::recursive);
  BOOST_REQUIRE(!fs::is_symlink(dir.file("copy/checkpoint")));
  BOOST_REQUIRE(!fs::is_symlink(dir.file("copy/model.safetensors")));
  // the copy and the original, both resumed to step 4, end alike
  Config copy = c, original = c;
  copy.out = dir.file("copy"), copy.steps = original.steps = 4;
  train_translation(copy, RunMode::resume);
  train_translation(original, RunMode::resume);
  BOOST_CHECK(read_file(dir.file("copy/model.safetensors")) ==
              read_file(c.out + "/model.safetensors"));
  BOOST_CHECK(fs::read_symlink(dir.file("copy/checkpoint")) == checkpoint_folder_name(4));
  BOOST_CHECK((entries(dir.file("copy")) == entries(c.out)));
}

BOOST_AUTO_TEST_CASE(what_killed_writers_left_is_removed_on_the_next_start) {
  ScratchDir dir("stale");
  const Config c = tiny_copy(dir.file("run"), 2);
  train_translation(c);
  const std::string current = fs::read_symlink(c.out + "/checkpoint").string();
  // As a `kill -9` leaves them: a temporary of write_file_atomic, a checkpoint folder half
  // written, the switch's link, a picture's temporary, nn::save_safetensors's temporary.
  fs::create_directories(c.out + "/checkpoint.000000003");
  fs::create_directories(c.out + "/attention");
  write_file_atomic(c.out + "/model.json.tmp.4242", "partial");
  write_file_atomic(c.out + "/checkpoint.000000003/model.safetensors", "partial");
  fs::create_symlink("checkpoint.000000003", c.out + "/checkpoint.tmp.4242");
  write_file_atomic(c.out + "/attention/encoder.0.self.png.tmp.77", "partial");
  write_file_atomic(c.out + "/model.int8.safetensors.tmp", "partial");
  write_file_atomic(c.out + "/notes.tmp.txt", "the user's");  // not qkv's: kept
  write_file_atomic(c.out + "/notes.txt.tmp.12", "the user's");
  Config more = c;
  more.steps = 4;
  train_translation(more, RunMode::resume);
  for (const char* gone : {"model.json.tmp.4242", "checkpoint.000000003", "checkpoint.tmp.4242",
                           "attention/encoder.0.self.png.tmp.77", "model.int8.safetensors.tmp"})
    BOOST_CHECK_MESSAGE(!fs::exists(fs::symlink_status(c.out + "/" + gone)), gone << " is left");
  BOOST_CHECK(fs::exists(c.out + "/notes.tmp.txt"));
  BOOST_CHECK(fs::exists(c.out + "/notes.txt.tmp.12"));
  BOOST_CHECK(!fs::exists(c.out + "/" + current));  // the checkpoint of step 2, replaced
  BOOST_CHECK(fs::read_symlink(c.out + "/checkpoint") == checkpoint_folder_name(4));
  BOOST_CHECK(read_file(c.out + "/log.txt").find("removed 5 temporary file(s)") !=
              std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_torn_last_line_of_metrics_is_cut_off_on_resume) {
  // A crash in the middle of an append. loss.png (pictures on) reads metrics.jsonl back at every
  // evaluation: with the partial line left, the resumed run's next line would join it and that
  // evaluation would fail.
  ScratchDir dir("torn");
  Config c = tiny_copy(dir.file("run"), 2);
  c.pictures = true;
  train_translation(c);
  const std::string metrics = c.out + "/metrics.jsonl";
  const size_t whole = lines_of(metrics);
  {
    std::ofstream out(metrics, std::ios::app);
    out << "{\"step\":3,\"lo";
  }
  c.steps = 4;
  BOOST_CHECK_NO_THROW(train_translation(c, RunMode::resume));
  // every line parses, and the run's steps 3 and 4 are there once each
  std::ifstream in(metrics);
  std::string line;
  size_t lines = 0, step3 = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);  // throws on a torn line
    step3 += j["step"] == 3 && j.contains("loss");
    ++lines;
  }
  BOOST_CHECK_EQUAL(step3, 1u);
  BOOST_CHECK_EQUAL(lines, whole + 2 + 1 + 1);  // steps 3-4, the evaluation at 4, the test
  BOOST_CHECK(read_file(c.out + "/log.txt")
                  .find("metrics.jsonl: removed an incomplete last line (13 bytes)") !=
              std::string::npos);
}

// The stop signals, in a child process (the flag cannot be cleared, and a second signal ends the
// process): one SIGTERM or SIGHUP is recorded and the process goes on to write its checkpoint; a
// second one ends it at once by the signal. raise() delivers before it returns, except under
// ThreadSanitizer, which defers a signal to its next intercepted call: the sleep after each
// raise() is one.
BOOST_AUTO_TEST_CASE(a_stop_signal_is_recorded_and_a_second_one_ends_the_process) {
#ifdef __SANITIZE_THREAD__
  // ThreadSanitizer holds back signals in a child forked from a threaded process, so the child
  // cannot see its own raise(): the check runs in the regular and ASan builds (and the CLI's
  // cli_kill_resume sends real signals in every build).
  BOOST_TEST_MESSAGE("not run under ThreadSanitizer");
  return;
#endif
  auto child = [](int signal, int times) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      install_interrupt_handler();
      for (int i = 0; i < times; ++i) {
        std::raise(signal);
        ::usleep(20000);
      }
      ::_exit(interrupt_requested() && interrupt_signal() == signal ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  };
  for (int signal : {SIGTERM, SIGHUP, SIGINT}) {
    const int once = child(signal, 1), twice = child(signal, 2);
    BOOST_CHECK_MESSAGE(WIFEXITED(once) && WEXITSTATUS(once) == 0,
                        "signal " << signal << " once: status " << once);
    BOOST_CHECK_MESSAGE(WIFSIGNALED(twice) && WTERMSIG(twice) == signal,
                        "signal " << signal << " twice: status " << twice);
  }
}

// A process blocked writing to a pipe nobody reads (mpirun stops reading its ranks' output once it
// is told to stop, and passes the signal on later) must come back from the write when the stop
// signal arrives, so the training loop can reach its checkpoint: the handler is installed
// without SA_RESTART. The child fills a pipe the parent never reads and writes on; the parent
// sends SIGTERM once the child has blocked (it stops reporting progress) and expects the child
// to exit 0, having seen the write fail and the signal recorded.
BOOST_AUTO_TEST_CASE(a_stop_signal_ends_a_write_blocked_on_a_full_pipe) {
#ifdef __SANITIZE_THREAD__
  // As above: ThreadSanitizer holds back the signal in a child forked from a threaded process.
  BOOST_TEST_MESSAGE("not run under ThreadSanitizer");
  return;
#endif
  int output[2], progress[2];
  BOOST_REQUIRE(::pipe(output) == 0 && ::pipe(progress) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(output[0]);
    ::close(progress[0]);
    install_interrupt_handler();
    const std::string chunk(4096, 'x');
    for (;;) {
      // a write that blocks until the signal comes back -1 (EINTR) or short
      const ssize_t n = ::write(output[1], chunk.data(), chunk.size());
      if (n < ssize_t(chunk.size())) break;
      const char tick = 't';
      if (::write(progress[1], &tick, 1) != 1) ::_exit(2);
    }
    ::_exit(interrupt_requested() && interrupt_signal() == SIGTERM ? 0 : 1);
  }
  ::close(output[1]);
  ::close(progress[1]);
  // Read the child's ticks until none comes for a second: it is blocked on the full pipe.
  int64_t ticks = 0;
  for (;;) {
    pollfd p{.fd = progress[0], .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 1000) <= 0) break;
    char buf[256];
    const ssize_t n = ::read(progress[0], buf, sizeof buf);
    if (n <= 0) break;
    ticks += n;
  }
  BOOST_TEST_MESSAGE("the child blocked after " << ticks << " writes of 4 KiB");
  ::kill(pid, SIGTERM);
  // Wait up to a minute (the child should return at once); a child still blocked is killed so
  // the test fails instead of hanging.
  int status = 0;
  for (int i = 0; i < 600 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) ::usleep(100000);
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ::close(output[0]);
  ::close(progress[0]);
  BOOST_CHECK_MESSAGE(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "the blocked write did not return on SIGTERM: status " << status);
}

BOOST_AUTO_TEST_SUITE_END()
