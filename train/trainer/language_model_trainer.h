// `qkv train lm`: a GPT language model on one UTF-8 text file (task "lm"), through the training
// loop the other trainers run (train/trainer/training_loop.h): the run folder, checkpoints,
// --resume, stop signals, the non-finite-step check, --precision and --device.
//
// The last valid_fraction of --data is the validation text; the rest trains. One step is a batch
// of windows of context + 1 tokens at random starts, each start a pure function of (seed, the
// batch's place in the run), so a resumed run draws the batches an uninterrupted one would. Every
// eval_every steps: the next-token loss on valid_size windows of the validation text, in nats per
// token, bits per character (char) or per byte (bpe), and perplexity. The run ends on its last
// checkpoint.
#pragma once

#include "train/config.h"
#include "train/run_dir.h"
#include "train/trainer/translation_trainer.h"

namespace qkv::train {

// The defaults of `qkv train lm` where they differ from the translation ones: nanoGPT's character
// model at its CPU size (4 layers, context 64, batch 12, no dropout, learned positions).
Config language_model_defaults();

TrainResult train_language_model(const Config& config, RunMode mode);

}  // namespace qkv::train
