// run_logits RUN_DIR INPUTS.safetensors OUTPUT.safetensors
//
// qkv's logits for given inputs, from a run folder loaded as `qkv translate` and `qkv eval` load it
// (load_translator, load_classifier: model.json, the vocabularies, best.safetensors or, in a run
// without one, model.safetensors, as qkv_torch.load_run reads them; eval mode, no gradients), so
// tests/torch/test_run_roundtrip.py can hold PyTorch's to them.
//
//   translation run: "src" int64 [B, S], "src_pad_mask" bool [B, S] (true = pad), "tgt_in" int64
//                    [B, T] -> "logits" [B, T, target vocabulary] (teacher forcing, causal)
//   classifier run:  "inputs" int64 ids [B, T] with "pad_mask" bool [B, T], or float32 images
//                    [B, C, H, W] -> "logits" [B, classes], as Classifier::forward gives them
#include <cstdio>
#include <exception>
#include <string>

#include "engine/error.h"
#include "nn/safetensors.h"
#include "train/trainer/best_model.h"
#include "train/trainer/classifier.h"
#include "train/trainer/translator.h"

namespace {

using qkv::Tensor;

const Tensor& input(const qkv::nn::TensorMap& inputs, const std::string& name,
                    const std::string& file) {
  auto it = inputs.find(name);
  QKV_CHECK(it != inputs.end(), "inputs", file, " has no tensor \"", name, "\"");
  return it->second;
}

Tensor translation_logits(const std::string& run, const qkv::nn::TensorMap& inputs,
                          const std::string& file) {
  qkv::train::Translator t =
      qkv::train::load_translator(run, qkv::train::choose_model_weights(run, /*last=*/false).file);
  return t.model->forward(input(inputs, "src", file), input(inputs, "tgt_in", file),
                          input(inputs, "src_pad_mask", file), Tensor());
}

Tensor classifier_logits(const std::string& run, const qkv::nn::TensorMap& inputs,
                         const std::string& file) {
  qkv::train::Classifier k =
      qkv::train::load_classifier(run, qkv::train::choose_model_weights(run, /*last=*/false).file);
  qkv::train::ClassifierBatch batch;
  batch.inputs = input(inputs, "inputs", file);
  if (k.text) batch.pad_mask = input(inputs, "pad_mask", file);
  return k.forward(batch);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: run_logits RUN_DIR INPUTS.safetensors OUTPUT.safetensors\n");
    return 2;
  }
  try {
    const std::string run = argv[1], in = argv[2], out = argv[3];
    const qkv::nn::TensorMap inputs = qkv::nn::load_safetensors(in).tensors;
    qkv::NoGrad no_grad;
    Tensor logits = qkv::train::run_architecture(run) == "Seq2SeqTransformer"
                        ? translation_logits(run, inputs, in)
                        : classifier_logits(run, inputs, in);
    qkv::nn::save_safetensors(out, {{"logits", logits.contiguous()}});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "run_logits: %s\n", e.what());
    return 1;
  }
}
