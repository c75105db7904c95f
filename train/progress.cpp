#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <utility>

namespace qkv::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%lds", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  return buf;
}

namespace {

std::string format_rate(double per_second) {
  char buf[32];
  if (per_second >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1fM", per_second / 1e6);
  else if (per_second >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", per_second / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", per_second);
  return buf;
}

}  // namespace

std::string format_progress(const ProgressState& s, double elapsed_seconds, int width) {
  double fraction = s.total > 0 ? double(s.step) / double(s.total) : 0.0;
  fraction = std::min(1.0, std::max(0.0, fraction));
  std::string bar(size_t(width), ' ');
  int filled = int(fraction * width);
  for (int i = 0; i < filled; ++i) bar[size_t(i)] = '=';
  if (filled < width) bar[size_t(filled)] = '>';

  char head[96];
  std::snprintf(head, sizeof head, "step %lld/%lld [", (long long)s.step, (long long)s.total);
  std::string line = head + bar + "] ";
  char tail[160];
  std::snprintf(tail, sizeof tail, "%3d%%  ", int(fraction * 100));
  line += tail;
  if (s.epoch > 0) line += "epoch " + std::to_string(s.epoch) + "  ";
  std::snprintf(tail, sizeof tail, "loss %.4f", s.loss);
  line += tail;
  if (s.metric) {
    std::snprintf(tail, sizeof tail, "  %s %.3f", s.metric_name.c_str(), *s.metric);
    line += tail;
  }
  if (s.items_per_second > 0)
    line += "  " + format_rate(s.items_per_second) + " " + s.items_name + "/s";
  if (fraction > 0 && fraction < 1)
    line += "  ETA " + format_duration(elapsed_seconds * (1 - fraction) / fraction);
  return line;
}

ProgressBar::ProgressBar(std::FILE* out, std::optional<bool> tty, std::function<bool()> muted)
    : out_(out),
      tty_(tty ? *tty : ::isatty(::fileno(out)) != 0),
      muted_(std::move(muted)),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(const ProgressState& s) {
  if (muted_ && muted_()) return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string line = format_progress(s, elapsed);
  if (tty_) {
    // \033[K clears what a longer previous line left to the right.
    std::fprintf(out_, "\r%s\033[K", line.c_str());
    line_open_ = true;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressBar::message(const std::string& line) {
  if (muted_ && muted_()) return;
  if (line_open_) std::fputs("\r\033[K", out_);
  line_open_ = false;
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (muted_ && muted_()) return;
  if (line_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    line_open_ = false;
  }
}

}  // namespace qkv::train
