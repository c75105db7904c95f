#include "train/trainer/training_common.h"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/random.h"
#include "nn/param_groups.h"
#include "nn/safetensors.h"
#include "train/atomic_file.h"
#include "train/checkpoint_dir.h"
#include "train/plots.h"
#include "train/trainer/run_choices.h"

namespace qkv::train {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
int g_joined_signal = 0;  // another rank's stop signal, which this rank follows
void on_stop_signal(int signal) {
  // A second signal means "now": the default action ends the process, and the last checkpoint
  // (switched whole, train/checkpoint_dir.h) is what a resume continues from.
  if (g_stop_signal != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_stop_signal = signal;
}
}  // namespace

void install_interrupt_handler() {
  for (int s : {SIGINT, SIGTERM, SIGHUP}) std::signal(s, on_stop_signal);
}
bool interrupt_requested() { return g_stop_signal != 0; }
int interrupt_signal() { return g_stop_signal != 0 ? g_stop_signal : g_joined_signal; }
void join_interrupt(int signal) {
  if (g_stop_signal == 0) g_joined_signal = signal;
}

std::string interruption_message(int64_t step, const std::string& run) {
  const int s = interrupt_signal();
  const std::string name = s == SIGINT    ? "SIGINT (Ctrl-C)"
                           : s == SIGTERM ? "SIGTERM"
                           : s == SIGHUP  ? "SIGHUP"
                                          : "signal " + std::to_string(s);
  return "interrupted by " + name + ": the checkpoint of step " + std::to_string(step) + " is in " +
         run + "; continue with --resume " + run;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string name_the_non_finite_op(uint64_t generator_offset, const std::function<void()>& redo) {
  const std::string prefix = "anomaly: ";
  default_generator().set_offset(generator_offset);
  try {
    AnomalyMode anomaly;
    redo();
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.rfind(prefix, 0) == 0) return m.substr(prefix.size());
    return "re-running the step under anomaly mode failed: " + m;
  }
  // Forward and backward came out finite the second time: the first run was not reproduced.
  return "re-running the step under anomaly mode found no NaN or Inf";
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

std::string non_finite_step_message(const std::string& what, int64_t step, const RunDir& run,
                                    const std::string& cause) {
  return "train: the " + what + " became non-finite at step " + std::to_string(step) + " (" +
         cause + "); the last good checkpoint is kept in " + run.path() +
         " (try a lower --lr or --clip 1)";
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"constant", "linear", "cosine", "noam"};
  return names;
}

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"adamw", "sgd"};
  return names;
}

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = {"fp32", "bf16"};
  return names;
}

DType compute_dtype(const std::string& precision) {
  if (precision == "fp32") return DType::f32;
  QKV_CHECK(precision == "bf16", "--precision", "expected fp32 or bf16, got '", precision, "'");
  return DType::bf16;
}

nn::LrSchedule make_schedule(const Config& c) {
  nn::LrSchedule s;
  s.kind = c.schedule == "linear"   ? "warmup_linear"
           : c.schedule == "cosine" ? "warmup_cosine"
                                    : c.schedule;  // constant, noam
  s.lr = c.lr;
  s.warmup_steps = std::min(c.warmup, c.steps / 2);  // a short run still gets its decay
  s.total_steps = c.steps;
  s.min_lr = c.schedule == "constant" ? c.lr : c.lr * 0.01;
  s.d_model = c.d_model;
  return s;
}

std::unique_ptr<nn::Optimizer> make_optimizer(const Config& c, const nn::Module& model) {
  // Biases, norm weights and embedding tables get no weight decay (nn/param_groups.h).
  std::vector<nn::ParamGroup> groups = nn::weight_decay_groups(model, c.weight_decay);
  if (c.optimizer == "sgd")
    return std::make_unique<nn::SGD>(
        std::move(groups), c.lr,
        nn::SGDOptions{.momentum = 0.9, .dampening = 0, .weight_decay = 0, .nesterov = false});
  return std::make_unique<nn::AdamW>(
      std::move(groups), c.lr,
      nn::AdamOptions{.beta1 = c.beta1, .beta2 = c.beta2, .eps = 1e-8, .weight_decay = 0});
}

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

bool finish_evaluation(const Config& config, RunDir& run, ProgressBar& bar, const nn::Module& model,
                       const nn::Optimizer& opt, TrainerState& state, const std::string& line,
                       const std::string& valid_key, const std::string& curve_title,
                       const std::string& stop_reason, bool stop_signal, bool& interrupted) {
  bar.message(line);
  run.log(line);
  state.generator_offset = default_generator().offset();
  save_checkpoint(run, model, opt, state);
  if (config.pictures) {
    auto curves = read_metric_series(run.file("metrics.jsonl"), {"loss", valid_key});
    curves[1].right_axis = true;  // a metric in [0, 1], on its own linear axis beside the log loss
    loss_curve_png(run.file("loss.png"), curves,
                   {.title = curve_title, .y_label = "training loss", .log_y = true});
  }
  bool stop = false;
  if (!stop_reason.empty()) {
    bar.message(stop_reason);
    run.log(stop_reason);
    stop = true;
  }
  if (stop_signal) {
    // The command line prints this line on stderr once the run has returned.
    run.log(interruption_message(state.step, run.path()));
    interrupted = stop = true;
  }
  return stop;
}

}  // namespace qkv::train
