#include "train/trainer/checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "nn/safetensors.h"
#include "train/atomic_file.h"
#include "train/checkpoint_dir.h"

namespace qkv::train {

void save_checkpoint(const RunDir& run, const nn::Module& model, const nn::Optimizer& opt,
                     const TrainerState& state) {
  nlohmann::json j = {{"step", state.step},
                      {"generator_offset", state.generator_offset},
                      {"best_metric", state.best_metric},
                      {"evals_since_best", state.evals_since_best}};
  if (state.world_size != 1) j["world_size"] = state.world_size;
  // The three files become the checkpoint together, in one switch (train/checkpoint_dir.h): a
  // write that fails (a full disk) or a process killed at any moment leaves the previous
  // checkpoint whole, never new weights beside an old optimizer state.
  write_checkpoint(
      run.path(), state.step,
      {{"model.safetensors", nn::safetensors_bytes(model.state_dict(), {{"format", "pt"}})},
       {"optimizer.safetensors", nn::safetensors_bytes(opt.state_dict())},
       {"trainer_state.json", j.dump(2) + "\n"}});
}

TrainerState load_checkpoint(const RunDir& run, nn::Module& model, nn::Optimizer& opt) {
  return load_checkpoint(run.path(), model, opt);
}

TrainerState load_checkpoint(const std::string& folder, nn::Module& model, nn::Optimizer& opt) {
  const std::filesystem::path dir(folder);
  auto file = [&](const char* name) { return (dir / name).string(); };
  std::string state_path = file("trainer_state.json");
  QKV_CHECK(std::filesystem::exists(state_path), "--resume", folder,
            " has no checkpoint (trainer_state.json) to resume from; a run stopped before its "
            "first checkpoint starts again with --overwrite");
  model.load_state_dict(nn::load_safetensors(file("model.safetensors")).tensors);
  // A checkpoint from before parameter groups numbered the parameters in model.parameters() order.
  opt.load_state_dict(nn::load_safetensors(file("optimizer.safetensors")).tensors,
                      model.parameters());
  return parse_trainer_state(read_file(state_path, "--resume"), state_path);
}

void check_resumed_world_size(const TrainerState& state, int64_t world_size,
                              const std::string& folder) {
  auto processes = [](int64_t n) {
    return n == 1 ? std::string("1 process (a plain qkv train)")
                  : std::to_string(n) + " processes (mpirun -np " + std::to_string(n) + ")";
  };
  QKV_CHECK(state.world_size == world_size, "--resume", folder, " was trained by ",
            processes(state.world_size), "; resume it with as many, not ", processes(world_size));
}

TrainerState parse_trainer_state(std::string_view text, const std::string& source) {
  // nlohmann's own exceptions (and its undefined float-to-integer casts) must not escape a
  // damaged file: every field's kind is checked before it is read.
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw Error(source + ": not a JSON object (is the file damaged?)");
  TrainerState s;
  if (!j.contains("step") || !j["step"].is_number_integer() || j["step"].get<int64_t>() < 0)
    throw Error(source + ": \"step\" must be a non-negative integer");
  s.step = j["step"].get<int64_t>();
  if (!j.contains("generator_offset") || !j["generator_offset"].is_number_unsigned())
    throw Error(source + ": \"generator_offset\" must be a non-negative integer");
  s.generator_offset = j["generator_offset"].get<uint64_t>();
  if (j.contains("best_metric")) {
    if (!j["best_metric"].is_number()) throw Error(source + ": \"best_metric\" must be a number");
    s.best_metric = j["best_metric"].get<double>();
  }
  if (j.contains("evals_since_best")) {
    if (!j["evals_since_best"].is_number_integer() || j["evals_since_best"].get<int64_t>() < 0)
      throw Error(source + ": \"evals_since_best\" must be a non-negative integer");
    s.evals_since_best = j["evals_since_best"].get<int64_t>();
  }
  if (j.contains("world_size")) {  // absent in a run of one process
    if (!j["world_size"].is_number_integer() || j["world_size"].get<int64_t>() < 1)
      throw Error(source + ": \"world_size\" must be a positive integer");
    s.world_size = j["world_size"].get<int64_t>();
  }
  return s;
}

}  // namespace qkv::train
