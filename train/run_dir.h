// The run folder (`--out runs/NAME`): everything one run writes lives here.
//
//   runs/NAME/config.json     the effective configuration (written once, atomically)
//   runs/NAME/metrics.jsonl   one JSON object per line, appended and flushed as the run goes
//   runs/NAME/log.txt         the human-readable log, the same lines the terminal shows
//   runs/NAME/qkv.lock        held by the one process writing the folder (train/run_lock.h)
//   runs/NAME/vocab.json, the checkpoint (train/checkpoint_dir.h), pictures/ ...
//
// Appended files are flushed after every line so that `tail -f` and a crashed run both see
// everything logged so far; whole files go through write_file_atomic.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "train/plots.h"
#include "train/run_lock.h"

namespace qkv::train {

// How a command that trains treats what the folder already holds.
enum class RunMode {
  fresh,      // a new run: a folder holding any file a run writes is refused (it names them)
  resume,     // --resume: continue the run there; a torn last line of metrics.jsonl is cut off
  overwrite,  // --overwrite: remove the run there (only the files a run writes), then start anew
};

// Whether `name`, an entry at the top of a run folder, is one that a run (or `qkv quantize`)
// writes: config.json, metrics.jsonl, model.safetensors, checkpoint.000000120, loss.png, ...
// The lock file is not one: it holds nothing of a run.
bool is_run_file_name(const std::string& name);

class RunDir {
 public:
  // Creates `path` (and its parents) if needed, checks that a file can be written in it, takes
  // its RunFolderLock for the RunDir's lifetime, removes the temporaries of killed writers, and
  // then applies `mode`. Throws qkv::Error("--out: cannot create run folder <path>: <reason>"),
  // "--out: <path> already holds ..." (fresh) or "... is in use by another qkv process" (the
  // option is --resume for a resume). What it repaired or removed is printed and logged.
  explicit RunDir(const std::string& path, RunMode mode = RunMode::fresh);
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
  void note(const std::string& line);  // printed and logged
  void refuse_a_run_in_the_way() const;
  void remove_the_previous_run();
  void repair_appended_files();

  std::string path_;
  std::unique_ptr<RunFolderLock> lock_;
  // Opened at the first line, so that a run failing before it logs anything leaves no files.
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
