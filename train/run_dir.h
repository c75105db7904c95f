// The run folder (`--out runs/NAME`): everything one run writes lives here.
//
//   runs/NAME/config.json     the effective configuration (written once, atomically)
//   runs/NAME/metrics.jsonl   one JSON object per line, appended and flushed as the run goes
//   runs/NAME/log.txt         the human-readable log, the same lines the terminal shows
//   runs/NAME/vocab.json, checkpoints, pictures/ ...
//
// Appended files are flushed after every line so that `tail -f` and a crashed run both see
// everything logged so far; whole files go through write_file_atomic.
#pragma once

#include <cstdio>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "train/plots.h"

namespace qkv::train {

class RunDir {
 public:
  // Creates `path` (and its parents) if needed and checks that a file can be written in it.
  // Throws qkv::Error("--out: cannot create run folder <path>: <reason>") otherwise.
  explicit RunDir(const std::string& path);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  // `path()/name`, creating the subfolder part of `name` (e.g. "pictures/attn.png") if any.
  std::string file(const std::string& name) const;

  // Appends one compact JSON object as a line to metrics.jsonl and flushes it.
  void append_metrics(const nlohmann::json& record);
  // Appends `line` (no newline needed) to log.txt and flushes it.
  void log(std::string_view line);
  // Writes `name` in the folder atomically.
  void write(const std::string& name, std::string_view bytes) const;

 private:
  std::string path_;
  std::FILE* metrics_ = nullptr;
  std::FILE* log_ = nullptr;
};

// Curves for loss_curve_png from a metrics.jsonl: one Series per key in `keys`, with x from
// `x_key`. Records without a key are skipped for that series (validation is logged less often than
// training). Throws qkv::Error("<path>:<line>: ...") for a line that is not a JSON object.
std::vector<Series> read_metric_series(const std::string& metrics_path,
                                       const std::vector<std::string>& keys,
                                       const std::string& x_key = "step");
// The same on the file's text; `source` (the file name) starts every error.
std::vector<Series> parse_metric_series(std::string_view text, const std::string& source,
                                        const std::vector<std::string>& keys,
                                        const std::string& x_key = "step");

}  // namespace qkv::train
