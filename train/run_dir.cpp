#include "train/run_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/error.h"
#include "train/atomic_file.h"
#include "train/checkpoint_dir.h"

namespace qkv::train {

namespace fs = std::filesystem;

namespace {

std::FILE* open_for_append(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) throw Error("--out: cannot open " + path + " for appending: " + std::strerror(errno));
  return f;
}

void append_line(std::FILE* f, std::string_view line, const std::string& path) {
  bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  ok = ok && std::fputc('\n', f) != EOF && std::fflush(f) == 0;
  if (!ok) throw Error("--out: cannot append to " + path + ": " + std::strerror(errno));
}

bool is_digits(const std::string& s, size_t from, size_t to) {
  return to > from && std::all_of(s.begin() + int64_t(from), s.begin() + int64_t(to),
                                  [](char c) { return c >= '0' && c <= '9'; });
}

// "se_block3.png" for prefix "se_block": a numbered picture.
bool is_numbered_png(const std::string& name, const std::string& prefix) {
  const std::string png = ".png";
  return name.size() > prefix.size() + png.size() && name.rfind(prefix, 0) == 0 &&
         name.compare(name.size() - png.size(), png.size(), png) == 0 &&
         is_digits(name, prefix.size(), name.size() - png.size());
}

// The top-level entries of `path` a run writes, sorted.
std::vector<std::string> run_files_in(const std::string& path) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (is_run_file_name(entry.path().filename().string()))
      found.push_back(entry.path().filename().string());
  std::sort(found.begin(), found.end());
  return found;
}

// The temporaries of the files a run writes (model.json.tmp.4242, the pictures' in attention/) and
// the checkpoint folders that no link names. Called under the folder's lock: no live writer owns
// them. A user's file is never taken for one: only temporaries of a run's own names are removed.
std::vector<std::string> remove_what_killed_writers_left(const std::string& path) {
  std::vector<std::string> removed = remove_stale_checkpoints(path);
  auto sweep = [&](const fs::path& folder, const std::string& shown_as,
                   const std::function<bool(const std::string&)>& owned) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      const std::string name = entry.path().filename().string(), of = temporary_of(name);
      if (of.empty() || !owned(of)) continue;
      fs::remove_all(entry.path(), ec);
      removed.push_back(shown_as + name);
    }
  };
  sweep(path, "", is_run_file_name);
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(fs::path(path) / "attention", ec)))
    sweep(fs::path(path) / "attention", "attention/", [](const std::string& of) {
      return of.size() > 4 && of.compare(of.size() - 4, 4, ".png") == 0;
    });
  return removed;
}

}  // namespace

bool is_run_file_name(const std::string& name) {
  // Every file the trainers, the checkpoint and `qkv quantize` write at the top of a run folder
  // (tests/train/test_run_folder_safety.cpp checks finished runs' folders against this list).
  static const char* const names[] = {"config.json",
                                      "metrics.jsonl",
                                      "log.txt",
                                      "model.json",
                                      "source_vocab.json",
                                      "target_vocab.json",
                                      "vocab.json",
                                      "model.safetensors",
                                      "optimizer.safetensors",
                                      "trainer_state.json",
                                      "model.int8.safetensors",
                                      "best.safetensors",
                                      "loss.png",
                                      "attention",
                                      "checkpoint"};
  for (const char* n : names)
    if (name == n) return true;
  const std::string folder = std::string(kCheckpointLink) + ".";  // checkpoint.000000120
  return name.rfind(folder, 0) == 0 || is_numbered_png(name, "se_block") ||
         is_numbered_png(name, "cbam_block");
}

RunDir::RunDir(const std::string& path, RunMode mode) : path_(path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw Error("--out: cannot create run folder " + path + ": " + ec.message());
  // create_directories succeeds on an existing read-only folder; find that out now, not at the
  // first checkpoint an hour later.
  if (::access(path.c_str(), W_OK | X_OK) != 0)
    throw Error("--out: cannot create run folder " + path + ": " + std::strerror(errno));
  // A folder in the way is refused before the lock file is made, so that it is left as found.
  if (mode == RunMode::fresh) refuse_a_run_in_the_way();
  lock_ = std::make_unique<RunFolderLock>(path, mode == RunMode::resume ? "--resume" : "--out");
  const std::vector<std::string> stale = remove_what_killed_writers_left(path);
  if (mode == RunMode::fresh) refuse_a_run_in_the_way();  // a run that began since the first look
  if (mode == RunMode::overwrite) remove_the_previous_run();
  if (mode == RunMode::resume) repair_appended_files();
  if (!stale.empty()) {
    std::string list;
    for (size_t i = 0; i < stale.size() && i < 4; ++i) list += (i ? ", " : "") + stale[i];
    if (stale.size() > 4) list += ", ...";
    note("run folder: removed " + std::to_string(stale.size()) +
         " temporary file(s) that an interrupted run left (" + list + ")");
  }
}

void RunDir::refuse_a_run_in_the_way() const {
  std::vector<std::string> found = run_files_in(path_);
  if (found.empty()) return;
  // checkpoint.000000120 goes with the link `checkpoint`: naming the link says enough.
  const std::string folder = std::string(kCheckpointLink) + ".";
  if (std::find(found.begin(), found.end(), kCheckpointLink) != found.end())
    found.erase(std::remove_if(found.begin(), found.end(),
                               [&](const std::string& n) { return n.rfind(folder, 0) == 0; }),
                found.end());
  std::string list;
  for (size_t i = 0; i < found.size() && i < 8; ++i) list += (i ? ", " : "") + found[i];
  if (found.size() > 8) list += " and " + std::to_string(found.size() - 8) + " more";
  throw Error("--out: " + path_ + " already holds files of a run (" + list +
              "): continue that run with --resume " + path_ +
              ", replace it with --overwrite, or choose another --out");
}

void RunDir::remove_the_previous_run() {
  // Readers (qkv eval) wait rather than load a half-removed checkpoint.
  const CheckpointLock readers_wait(path_, CheckpointLock::write);
  for (const std::string& name : run_files_in(path_)) {
    const fs::path p = fs::path(path_) / name;
    std::error_code ec;
    if (name == "attention" && fs::is_directory(fs::symlink_status(p, ec))) {
      // Only the pictures: a folder of that name may hold other things too.
      for (const auto& entry : fs::directory_iterator(p, ec))
        if (entry.path().extension() == ".png") fs::remove(entry.path(), ec);
      fs::remove(p, ec);  // only if empty
      continue;
    }
    fs::remove_all(p, ec);
    if (ec) throw Error("--overwrite: cannot remove " + p.string() + ": " + ec.message());
  }
}

void RunDir::repair_appended_files() {
  // A crash in the middle of an append leaves a last line without its newline. metrics.jsonl is
  // read back (loss.png): that line goes, and the resumed run logs its step again if it comes
  // after the checkpoint. log.txt is only read by people: its line is ended.
  const std::string metrics = file("metrics.jsonl");
  std::error_code ec;
  if (fs::exists(metrics, ec)) {
    const std::string text = read_file(metrics, "--resume");
    if (!text.empty() && text.back() != '\n') {
      const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (::truncate(metrics.c_str(), off_t(keep)) != 0)
        throw Error("--resume: cannot repair " + metrics + ": " + std::strerror(errno));
      note("metrics.jsonl: removed an incomplete last line (" + std::to_string(text.size() - keep) +
           " bytes) that an interrupted run left");
    }
  }
  const std::string log_path = file("log.txt");
  if (fs::exists(log_path, ec)) {
    const std::string text = read_file(log_path, "--resume");
    if (!text.empty() && text.back() != '\n') log("");
  }
}

void RunDir::note(const std::string& line) {
  std::printf("%s\n", line.c_str());
  log(line);
}

RunDir::~RunDir() {
  if (metrics_) std::fclose(metrics_);
  if (log_) std::fclose(log_);
}

std::string RunDir::file(const std::string& name) const {
  fs::path full = fs::path(path_) / name;
  if (full.has_parent_path() && full.parent_path() != fs::path(path_)) {
    std::error_code ec;
    fs::create_directories(full.parent_path(), ec);
    if (ec)
      throw Error("--out: cannot create " + full.parent_path().string() + ": " + ec.message());
  }
  return full.string();
}

void RunDir::append_metrics(const nlohmann::json& record) {
  if (!metrics_) metrics_ = open_for_append(file("metrics.jsonl"));
  append_line(metrics_, record.dump(), file("metrics.jsonl"));
}

void RunDir::log(std::string_view line) {
  if (!log_) log_ = open_for_append(file("log.txt"));
  append_line(log_, line, file("log.txt"));
}

void RunDir::write(const std::string& name, std::string_view bytes) const {
  write_file_atomic(file(name), bytes);
}

std::vector<Series> read_metric_series(const std::string& metrics_path,
                                       const std::vector<std::string>& keys,
                                       const std::string& x_key) {
  std::ifstream in(metrics_path);
  if (!in) throw Error(metrics_path + ": cannot open: " + std::strerror(errno));
  return parse_metric_series(read_file(metrics_path, "metrics"), metrics_path, keys, x_key);
}

std::vector<Series> parse_metric_series(std::string_view text, const std::string& source,
                                        const std::vector<std::string>& keys,
                                        const std::string& x_key) {
  std::istringstream in{std::string(text)};
  std::vector<Series> series;
  for (const auto& k : keys) series.push_back({k, {}, {}});
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object())
      throw Error(source + ":" + std::to_string(number) + ": not a JSON object");
    if (!record.contains(x_key) || !record[x_key].is_number()) continue;
    for (auto& s : series)
      if (record.contains(s.name) && record[s.name].is_number()) {
        s.x.push_back(record[x_key].get<double>());
        s.y.push_back(record[s.name].get<double>());
      }
  }
  return series;
}

}  // namespace qkv::train
