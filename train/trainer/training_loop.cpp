#include "train/trainer/training_loop.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "engine/random.h"
#include "train/progress.h"
#include "train/trainer/evaluation_end.h"
#include "train/trainer/interrupt.h"
#include "train/trainer/micro_batches.h"
#include "train/trainer/non_finite_diagnosis.h"
#include "train/trainer/precision.h"
#include "train/trainer/step_profile.h"
#include "train/trainer/translator.h"

namespace qkv::train {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Whether any rank has received a stop signal: every rank then takes the same branch at the
// same step (a signal that mpirun forwards reaches the ranks at different moments).
bool any_rank_interrupted(ProcessGroup& group) {
  if (group.size() == 1) return interrupt_requested();
  Tensor flag = scalar_tensor(interrupt_requested() ? 1 : 0, TensorOptions{}.with(DType::i64));
  group.allreduce_sum(flag);
  if (flag.item() == 0) return false;
  join_interrupt(SIGTERM);
  return true;
}

}  // namespace

LoopResult run_training_loop(const Config& config, RunDir& run, nn::Module& model,
                             nn::Optimizer& opt, const nn::LrSchedule& schedule,
                             const EarlyStopping& early_stopping, TrainerState& state,
                             const TrainingHooks& hooks) {
  ProgressBar bar(stdout, std::nullopt, [] { return interrupt_signal() != 0; });
  LoopResult result;
  const auto start = std::chrono::steady_clock::now();
  auto last_log = start;
  int64_t items_since_log = 0;
  std::optional<double> last_metric;
  bool stop = false;
  int64_t batches_to_skip = state.step;       // a resumed run replays the data order up to its step
  const int64_t first_step = state.step + 1;  // --trace prints the first batch this run trains on

  // One process with --accumulate 1 runs each batch as it is; more ranks or micro-batches cut it.
  MicroBatchSteps micro(opt.params(), ProcessGroup::from_environment(), config.accumulate,
                        config.dp_overlap == "on");
  const MicroBatchHooks micro_hooks{hooks.load_batch, hooks.loss_terms, hooks.summed_loss};
  StepProfile profile(config.profile, config.profile_warmup, first_step, config.steps,
                      backend_for(parse_device(config.device)), /*cpu=*/config.device == "cpu",
                      /*bf16=*/compute_dtype(config.precision) == DType::bf16);

  const RunOutputs outputs{.run = run,
                           .bar = bar,
                           .model = model,
                           .opt = opt,
                           .pictures = config.pictures,
                           .valid_key = hooks.valid_key,
                           .curve_title = hooks.curve_title};
  model.train();
  for (uint64_t epoch = 0; !stop && state.step < config.steps; ++epoch) {
    for (const auto& indices : hooks.plan_epoch(epoch)) {
      if (batches_to_skip > 0) {
        --batches_to_skip;
        continue;
      }
      if (state.step >= config.steps || stop) break;
      ++state.step;
      profile.before_step(state.step);
      // Under --profile: what no phase below claims (the batch, logging) is the step's "other".
      ProfileScope step_scope("step", ProfilePhase::other);
      if (!micro.active()) hooks.load_batch(indices);
      opt.scale_lr(schedule.factor(state.step));  // every parameter group follows the schedule

      if (config.trace && state.step == first_step) {
        if (micro.active()) hooks.load_batch(indices);  // the statistics of the whole batch
        trace_attention(hooks.attention_stats(), state.step, run);
      }
      const uint64_t step_generator_offset = default_generator().offset();
      auto forward_backward = [&] {
        Tensor loss;
        {
          ProfileScope phase("forward", ProfilePhase::forward);  // backward has its own scope
          loss = hooks.loss();
        }
        opt.zero_grad();
        loss.backward();
        return loss;
      };
      double loss_value = 0;
      int64_t items = 0;
      if (micro.active()) {
        const MicroBatchSteps::Result r = micro.step(state.step, indices, micro_hooks);
        loss_value = r.loss;
        items = r.terms;  // the global batch's target tokens or examples
      } else {
        loss_value =
            micro.whole_batch(state.step, indices, [&] { return forward_backward().item(); });
        items = hooks.batch_items();
      }
      double grad_norm = 0;
      {
        ProfileScope phase("clip_grad_norm", ProfilePhase::optimizer);
        grad_norm = nn::clip_grad_norm_(opt.params(), config.clip > 0 ? config.clip : INFINITY);
      }
      // Every rank holds the same loss and gradients: they stop here together.
      if (!std::isfinite(loss_value) || !std::isfinite(grad_norm))
        throw Error(non_finite_step_message(
            std::isfinite(loss_value) ? "gradient norm" : "loss", state.step, run,
            name_the_non_finite_op(step_generator_offset, [&] {
              if (micro.active())  // this rank's share alone: the replay runs no collective
                micro.step(state.step, indices, micro_hooks, /*reduce=*/false);
              else
                micro.whole_batch(state.step, indices, [&] { return forward_backward().item(); });
            })));
      {
        ProfileScope phase("optimizer", ProfilePhase::optimizer);
        opt.step();
      }
      if (const std::string report = profile.after_step(state.step, run); !report.empty()) {
        run.log(report);
        bar.message(report);
      }
      items_since_log += items;

      if (state.step % config.log_every == 0 || state.step == 1) {
        const double dt = seconds_since(last_log);
        last_log = std::chrono::steady_clock::now();
        const double throughput = dt > 0 ? items_since_log / dt : 0;
        items_since_log = 0;
        nlohmann::json record = {{"step", state.step},     {"epoch", epoch + 1},
                                 {"loss", loss_value},     {"lr", opt.lr()},
                                 {"grad_norm", grad_norm}, {hooks.throughput_key, throughput}};
        if (micro.active()) hooks.load_batch(indices);  // the statistics of the whole batch
        auto attention = hooks.attention_stats();
        if (!attention.empty()) record["attention_entropy"] = entropy_record(attention);
        run.append_metrics(record);
        bar.update({.step = state.step,
                    .total = config.steps,
                    .epoch = int64_t(epoch) + 1,
                    .loss = loss_value,
                    .metric = last_metric,
                    .metric_name = hooks.metric_label,
                    .items_per_second = throughput,
                    .items_name = hooks.items_label});
      }

      const bool last = state.step == config.steps;
      const bool stop_signal = any_rank_interrupted(micro.group());
      const bool evaluate_now = state.step % config.eval_every == 0 || last || stop_signal;
      if (!evaluate_now && config.checkpoint_every > 0 &&
          state.step % config.checkpoint_every == 0) {
        state.generator_offset = default_generator().offset();
        save_checkpoint(run, model, opt, state);
      }
      if (evaluate_now) {
        Evaluation e = hooks.evaluate();
        last_metric = e.headline;
        const std::string stop_reason = early_stopping.update(e.metrics, state);
        nlohmann::json record = {{"step", state.step}};
        record.update(e.record);
        run.append_metrics(record);
        std::optional<BestModel> new_best;  // early stopping's metric improved on its best
        if (state.evals_since_best == 0)
          new_best = BestModel{early_stopping.metric(), state.best_metric, state.step};
        const AfterEvaluation after = finish_evaluation(outputs, state,
                                                        {.line = e.line,
                                                         .stop_reason = stop_reason,
                                                         .stop_signal = stop_signal,
                                                         .new_best = new_best});
        stop = after != AfterEvaluation::go_on;
        result.interrupted = after == AfterEvaluation::interrupted;
      }
    }
  }
  micro.check_parameters_agree(state.step);  // the ranks ended in the same model
  bar.finish();
  if (const std::string d = micro.describe(); !d.empty()) {
    run.log(d);
    if (!result.interrupted) std::printf("%s\n", d.c_str());
  }
  result.steps = state.step;
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace qkv::train
