#include "train/run_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/error.h"
#include "train/atomic_file.h"

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

}  // namespace

RunDir::RunDir(const std::string& path) : path_(path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw Error("--out: cannot create run folder " + path + ": " + ec.message());
  // create_directories succeeds on an existing read-only folder; find that out now, not at the
  // first checkpoint an hour later.
  if (::access(path.c_str(), W_OK | X_OK) != 0)
    throw Error("--out: cannot create run folder " + path + ": " + std::strerror(errno));
  metrics_ = open_for_append(file("metrics.jsonl"));
  log_ = open_for_append(file("log.txt"));
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
  append_line(metrics_, record.dump(), file("metrics.jsonl"));
}

void RunDir::log(std::string_view line) { append_line(log_, line, file("log.txt")); }

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
