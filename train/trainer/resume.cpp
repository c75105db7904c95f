#include "train/trainer/resume.h"

#include <algorithm>
#include <filesystem>

#include "engine/error.h"
#include "train/atomic_file.h"
#include "train/trainer/model_files.h"
#include "train/trainer/translator.h"

namespace qkv::train {

namespace fs = std::filesystem;

Config resumed_run_config(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "config.json").string();
  QKV_CHECK(fs::exists(path), "--resume", run_dir, " is not a run folder (it has no config.json)");
  return load_config(path);
}

Config with_resume_history(Config requested, const Config& saved, int64_t trained_steps) {
  QKV_CHECK(requested.steps >= trained_steps, "--steps", requested.steps, " is fewer than the ",
            trained_steps, " steps the run in ", requested.out,
            " has already trained: give at least that many");
  for (const auto& change : config_changes(saved, requested))
    requested.resume_history.push_back({trained_steps, change.key, change.before, change.after});
  return requested;
}

void check_model_json_matches(const std::string& run_dir, const nlohmann::json& built) {
  const std::string path = (fs::path(run_dir) / kModelJson).string();
  if (!fs::exists(path)) return;
  const std::string differences = model_config_differences(read_model_json_config(path), built);
  QKV_CHECK(differences.empty(), "--resume", path, " does not describe the model the run's ",
            "config.json builds: ", differences, " (was model.json edited?)");
}

void check_resumed_vocab(const RunDir& run, const std::string& file, const Vocab& from_data) {
  const std::string path = run.file(file);
  if (!std::filesystem::exists(path)) return;
  Vocab saved = Vocab::load(path);
  if (saved.to_json() == from_data.to_json()) return;
  // The sizes alone do not tell two vocabularies apart: name the first token that differs, or
  // the tokenizer when all shared tokens agree.
  std::string how;
  for (size_t id = 0; id < std::min(saved.size(), from_data.size()) && how.empty(); ++id)
    if (saved.token(int64_t(id)) != from_data.token(int64_t(id)))
      how = "token " + std::to_string(id) + " is '" + from_data.token(int64_t(id)) +
            "' in the data, '" + saved.token(int64_t(id)) + "' in the file";
  if (how.empty() && saved.size() == from_data.size())
    how = "the tokenizer is " + to_string(from_data.kind()) + " in the data, " +
          to_string(saved.kind()) + " in the file";
  throw Error("--resume: the data's vocabulary (" + std::to_string(from_data.size()) +
              " tokens) is not the one in " + path + " (" + std::to_string(saved.size()) +
              " tokens" + (how.empty() ? "" : "; " + how) +
              ") that the checkpoint was trained with; resume with the run's own --task and "
              "--data");
}

}  // namespace qkv::train
