// The GPT language model trained at nanoGPT's CPU size (4 layers, 4 heads, width 128, context 64,
// batch 12, dropout 0; AdamW lr 1e-3 warmup 100 cosine to 1e-4, beta2 0.99, weight decay 0.1, clip
// 1) on a text file with the character tokenizer; tests/bench/torch_lm.py is its PyTorch twin and
// tests/bench/compare_lm.sh runs both back to back. Prints "ms/step", "valid_loss" and
// "bits_per_character" lines.
// Usage: lm_bench FILE [steps=2000] [threads=2] [positions=learned]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/error.h"
#include "engine/parallel.h"
#include "train/bench/openblas.h"
#include "train/trainer/lm_trainer.h"

using namespace qkv;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lm_bench FILE [steps] [threads] [learned|rope]\n");
    return 2;
  }
  try {
    train::LmTrainConfig c;
    c.data = argv[1];
    c.steps = argc > 2 ? std::stoll(argv[2]) : 2000;
    set_num_threads(argc > 3 ? std::stoi(argv[3]) : 2);
    c.model = {.context = 64,
               .d_model = 128,
               .num_heads = 4,
               .num_layers = 4,
               .dim_feedforward = 512,
               .dropout = 0,
               .positions = argc > 4 ? argv[4] : "learned"};
    c.batch_size = 12;
    c.eval_every = c.steps > 0 ? c.steps : 1;
    c.eval_windows = 2400;  // 153600 validation tokens, as nanoGPT's 200 x 12 x 64
    const std::string run =
        (std::filesystem::temp_directory_path() / ("lm_bench_" + std::to_string(::getpid())))
            .string();
    train::LmTrainResult r = train::train_lm(c, run);
    std::filesystem::remove_all(run);
    const train::LmEvaluation& last = r.evaluations.back();
    std::printf(
        "qkv GPT: vocab %lld, %lld training / %lld validation tokens, %d threads, %lld steps\n",
        (long long)r.vocab, (long long)r.train_tokens, (long long)r.valid_tokens, num_threads(),
        (long long)c.steps);
    std::printf("ms/step %.3f\n",
                1000.0 * double(c.batch_size * c.model.context) / last.tokens_per_second);
    std::printf("valid_loss %.4f\n", last.loss);
    std::printf("bits_per_character %.4f\n", last.bits_per_unit);
    const bench::OpenBlas& blas = bench::OpenBlas::get();
    if (blas.available()) std::printf("openblas_coretype %s\n", blas.core_name().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "lm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
