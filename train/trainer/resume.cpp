#include "train/trainer/resume.h"

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

}  // namespace qkv::train
