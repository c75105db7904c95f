// Training progress on the terminal.
//
// On a TTY one line is redrawn in place (carriage return) so the screen shows the current state,
// not a scroll of thousands of lines; when stdout is a file or a pipe (CI, nohup, `| tee`) each
// update is printed as a plain line instead, because carriage returns make logs unreadable.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace qkv::train {

struct ProgressState {
  int64_t step = 0;
  int64_t total = 0;
  int64_t epoch = 0;  // the pass over the training data the step belongs to, from 1; 0 = not shown
  double loss = 0;
  std::optional<double> metric;  // shown when set, e.g. validation exact match
  std::string metric_name = "metric";
  double items_per_second = 0;  // throughput, in whatever unit the caller counts (tokens, images)
  std::string items_name = "tok";
};

// "step 120/2000 [====>      ] 6%  epoch 3  loss 2.3410  exact 0.412  5.1k tok/s  ETA 3m12s"
// `width` is the bar's width in characters; ETA from `elapsed` and the fraction done.
std::string format_progress(const ProgressState& s, double elapsed_seconds, int width = 24);

// "3m12s", "1h05m", "42s".
std::string format_duration(double seconds);

class ProgressBar {
 public:
  // `out` defaults to stdout; `tty` is detected from it unless given. While `muted` returns true
  // the bar writes nothing (the trainer's: a stop signal is pending, and whoever reads the
  // terminal may have stopped reading, train/trainer/interrupt.h).
  explicit ProgressBar(std::FILE* out = stdout, std::optional<bool> tty = std::nullopt,
                       std::function<bool()> muted = nullptr);
  ~ProgressBar();
  void update(const ProgressState& s);
  // Prints `line` (an evaluation result, a warning) on its own line; on a TTY the bar is cleared
  // first and comes back with the next update.
  void message(const std::string& line);
  // Ends the in-place line (on a TTY) so that following output starts on a fresh line.
  void finish();
  bool is_tty() const { return tty_; }

 private:
  std::FILE* out_;
  bool tty_;
  std::function<bool()> muted_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace qkv::train
