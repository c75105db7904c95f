#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "train/atomic_file.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/run_dir.h"

using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_SUITE(run_folder)

BOOST_AUTO_TEST_CASE(atomic_write_replaces_the_file) {
  ScratchDir dir("atomic");
  write_file_atomic(dir.file("a.txt"), "old");
  write_file_atomic(dir.file("a.txt"), "new contents");
  BOOST_TEST(read_file(dir.file("a.txt")) == "new contents");
  // No temporary file is left behind.
  BOOST_TEST(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}) == 1);
}

BOOST_AUTO_TEST_CASE(failed_write_leaves_the_old_file_intact) {
  ScratchDir dir("atomic_fail");
  const std::string target = dir.file("config.json");
  write_file_atomic(target, "old");
  // Block the temporary file's name with a folder: creating the temporary fails, as it would on a
  // full or read-only disk, and that works even for root (who ignores permission bits).
  fs::create_directory(target + ".tmp." + std::to_string(::getpid()));
  BOOST_CHECK_EXCEPTION(write_file_atomic(target, "new"), qkv::Error, message_has("config.json"));
  BOOST_TEST(read_file(target) == "old");
  fs::remove(target + ".tmp." + std::to_string(::getpid()));

  if (::geteuid() != 0) {  // permission bits only bind other users
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
    BOOST_CHECK_THROW(write_file_atomic(target, "new"), qkv::Error);
    BOOST_TEST(read_file(target) == "old");
  }
}

BOOST_AUTO_TEST_CASE(run_dir_appends_metrics_and_log) {
  ScratchDir dir("run");
  {
    RunDir run(dir.file("runs/demo"));
    run.append_metrics({{"step", 1}, {"loss", 2.5}});
    run.append_metrics({{"step", 2}, {"loss", 2.25}});
    run.log("hello");
    run.write("pictures/x.txt", "picture");
    // Flushed at once: readable while the RunDir is still open.
    BOOST_TEST(read_file(run.file("metrics.jsonl")) ==
               "{\"loss\":2.5,\"step\":1}\n{\"loss\":2.25,\"step\":2}\n");
  }
  BOOST_TEST(read_file(dir.file("runs/demo/log.txt")) == "hello\n");
  BOOST_TEST(read_file(dir.file("runs/demo/pictures/x.txt")) == "picture");
  // A run folder under a file cannot be created.
  write_file_atomic(dir.file("plain"), "x");
  BOOST_CHECK_EXCEPTION(RunDir(dir.file("plain/run")), qkv::Error,
                        message_has("--out", "plain/run"));
}

BOOST_AUTO_TEST_CASE(metric_series_from_jsonl) {
  ScratchDir dir("series");
  {
    RunDir run(dir.file("r"));
    run.append_metrics({{"step", 10}, {"train_loss", 2.0}});
    run.append_metrics({{"step", 20}, {"train_loss", 1.5}, {"valid_loss", 1.8}});
    run.append_metrics({{"step", 30}, {"train_loss", 1.0}});
  }
  auto s = read_metric_series(dir.file("r/metrics.jsonl"), {"train_loss", "valid_loss"});
  BOOST_TEST((s[0].x == std::vector<double>{10, 20, 30}));
  BOOST_TEST((s[0].y == std::vector<double>{2.0, 1.5, 1.0}));
  BOOST_TEST((s[1].x == std::vector<double>{20}));
  write_file_atomic(dir.file("bad.jsonl"), "{\"step\": 1}\n{\"step\": 2, \"loss\"\n");
  BOOST_CHECK_EXCEPTION(read_metric_series(dir.file("bad.jsonl"), {"loss"}), qkv::Error,
                        message_has("bad.jsonl:2:"));
}

BOOST_AUTO_TEST_CASE(progress_line) {
  ProgressState s{.step = 250,
                  .total = 1000,
                  .loss = 1.23456,
                  .metric = 0.5,
                  .metric_name = "exact",
                  .items_per_second = 5100,
                  .items_name = "tok"};
  std::string line = format_progress(s, 60.0, 10);
  BOOST_TEST(line ==
             "step 250/1000 [==>       ]  25%  loss 1.2346  exact 0.500  5.1k tok/s  ETA 3m00s");
  BOOST_TEST(format_duration(3725) == "1h02m");
  BOOST_TEST(format_duration(42) == "42s");
  std::FILE* f = std::tmpfile();
  ProgressBar bar(f, false);  // not a TTY: plain lines
  bar.update(s);
  bar.update(s);
  std::rewind(f);
  char buf[512] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::string out(buf, n);
  BOOST_TEST(std::count(out.begin(), out.end(), '\n') == 2);
  BOOST_TEST(out.find('\r') == std::string::npos);
  std::fclose(f);

  // On a TTY: redrawn in place, and a message clears the bar before its own line.
  f = std::tmpfile();
  {
    ProgressBar tty(f, true);
    tty.update(s);
    tty.message("valid exact 0.5");
  }
  std::rewind(f);
  n = std::fread(buf, 1, sizeof buf - 1, f);
  out.assign(buf, n);
  BOOST_TEST(out.substr(0, 5) == "\rstep");
  BOOST_TEST(out.find("\r\033[Kvalid exact 0.5\n") != std::string::npos);
  std::fclose(f);

  // Muted (the trainer's bar while a stop signal is pending): nothing at all, not even the
  // newline that ends a redrawn line; unmuted again, it writes.
  f = std::tmpfile();
  bool muted = false;
  {
    ProgressBar quiet(f, true, [&] { return muted; });
    quiet.update(s);
    muted = true;
    const long before = std::ftell(f);
    quiet.update(s);
    quiet.message("valid exact 0.5");
    quiet.finish();
    BOOST_TEST(std::ftell(f) == before);
    muted = false;
    quiet.message("after");
    BOOST_TEST(std::ftell(f) > before);
  }
  std::fclose(f);
}

BOOST_AUTO_TEST_CASE(metrics) {
  BOOST_TEST(exact_match({"a", "b", "c", "d"}, {"a", "x", "c", "y"}) == 0.5);
  // 3 right of max(3,3) + max(1,2): 3 / 5.
  BOOST_TEST(token_accuracy({{1, 2, 3}, {4}}, {{1, 2, 9}, {4, 5}}) == 0.6);
  BOOST_TEST(classification_accuracy({0, 1, 1}, {0, 1, 0}) == 2.0 / 3.0,
             boost::test_tools::tolerance(1e-12));
  auto h = attention_row_entropy({1, 0, 0, 0, 0.25f, 0.25f, 0.25f, 0.25f}, 2, 4);
  BOOST_TEST(h[0] == 0.0);
  BOOST_TEST(h[1] == std::log(4.0), boost::test_tools::tolerance(1e-6));
  BOOST_CHECK_THROW(exact_match({"a"}, {}), qkv::Error);
}

BOOST_AUTO_TEST_SUITE_END()
