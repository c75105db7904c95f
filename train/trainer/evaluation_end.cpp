#include "train/trainer/evaluation_end.h"

#include "engine/random.h"
#include "train/plots.h"
#include "train/trainer/interrupt.h"

namespace qkv::train {

AfterEvaluation finish_evaluation(const RunOutputs& out, TrainerState& state,
                                  const EvaluationOutcome& outcome) {
  // The files first, the terminal last: on a stop signal the terminal may no longer be read
  // (interrupt.h), and a write to it must not stand between the run and its checkpoint.
  out.run.log(outcome.line);
  if (outcome.new_best) save_best_model(out.run, out.model, *outcome.new_best);
  state.generator_offset = default_generator().offset();
  save_checkpoint(out.run, out.model, out.opt, state);
  AfterEvaluation after = AfterEvaluation::go_on;
  if (!outcome.stop_reason.empty()) {
    out.run.log(outcome.stop_reason);
    after = AfterEvaluation::stop;
  }
  if (outcome.stop_signal) {
    // The command line prints this line on stderr once the run has returned.
    out.run.log(interruption_message(state.step, out.run.path()));
    after = AfterEvaluation::interrupted;
  }
  if (out.pictures) {
    auto curves = read_metric_series(out.run.file("metrics.jsonl"), {"loss", out.valid_key});
    curves[1].right_axis = true;  // a metric in [0, 1], on its own linear axis beside the log loss
    loss_curve_png(out.run.file("loss.png"), curves,
                   {.title = out.curve_title, .y_label = "training loss", .log_y = true});
  }
  out.bar.message(outcome.line);  // nothing once a stop is pending: the bar is muted
  if (!outcome.stop_reason.empty()) out.bar.message(outcome.stop_reason);
  return after;
}

}  // namespace qkv::train
