#include "train/scaled_defaults.h"

#include <algorithm>
#include <sstream>

#include "engine/error.h"
#include "train/tokenizer.h"

namespace qkv::train {

int64_t steps_per_epoch(size_t train_examples, int64_t batch_size) {
  const int64_t n = int64_t(train_examples);
  return std::max<int64_t>(1, (n + batch_size - 1) / batch_size);
}

RunLength choose_run_length(const Config& c, size_t train_examples, const std::string& items) {
  const int64_t per_epoch = steps_per_epoch(train_examples, c.batch_size);
  auto of_data = [&](int64_t epochs) {
    return std::to_string(epochs) + " epochs of " + std::to_string(train_examples) + " " + items +
           " at batch " + std::to_string(c.batch_size);
  };
  if (c.steps > 0) {
    std::ostringstream why;
    why.precision(3);
    why << "steps: " << c.steps << " (--steps; " << double(c.steps) / double(per_epoch)
        << " epochs of " << train_examples << " " << items << " at batch " << c.batch_size << ")";
    return {c.steps, why.str()};
  }
  // config.json records the steps, whose range ends at 10^9.
  QKV_CHECK(c.epochs * per_epoch <= 1'000'000'000, "--epochs", c.epochs, " epochs of ", per_epoch,
            " steps are more than 1000000000 steps");
  if (c.epochs > 0)
    return {c.epochs * per_epoch, "steps: " + std::to_string(c.epochs * per_epoch) +
                                      " (--epochs: " + of_data(c.epochs) + ")"};
  const int64_t wanted = kDefaultEpochs * per_epoch;
  const int64_t steps = std::clamp(wanted, kMinDefaultSteps, kMaxDefaultSteps);
  std::string line = "steps: " + std::to_string(steps) + " (";
  if (steps == wanted)
    line += of_data(kDefaultEpochs);
  else
    line += std::string(steps > wanted ? "the least" : "the most") + " a default run takes; " +
            of_data(kDefaultEpochs) + " would be " + std::to_string(wanted);
  return {steps, line + "; --steps or --epochs to change)"};
}

Config with_run_length(const Config& config, const RunLength& length) {
  Config c = config;
  c.steps = length.steps;
  c.epochs = 0;
  return c;
}

int64_t holdout_size(int64_t requested, size_t corpus_examples) {
  if (requested > 0) return requested;
  return std::clamp<int64_t>(int64_t(corpus_examples) / 10, 1, kMaxHoldout);
}

int64_t generated_holdout_size(int64_t requested) {
  return requested > 0 ? requested : kMaxHoldout;
}

PairsTokenizer choose_pairs_tokenizer(const std::vector<Pair>& train) {
  size_t one_word = 0;
  for (const Pair& p : train) {
    std::istringstream words(p.target);
    std::string first, second;
    if ((words >> first) && !(words >> second)) ++one_word;
  }
  const bool characters = 2 * one_word > train.size();
  const TokenizerKind kind = characters ? TokenizerKind::character : TokenizerKind::whitespace;
  const std::string share = std::to_string(one_word) + " of " + std::to_string(train.size()) +
                            " training targets are one word";
  return {
      {kind, kind},
      "tokenizer: " + to_string(kind) + " (" + share +
          (characters ? ", so unseen words are still spelled out" : ", so words are the tokens") +
          "; --tokenizer to change)"};
}

}  // namespace qkv::train
