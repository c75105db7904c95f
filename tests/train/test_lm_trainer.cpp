// The language-model trainer on a tiny structured corpus: the loss falls far below the unigram
// entropy of its characters, the metrics are consistent with each other, and the run folder
// holds what it says.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "helpers.h"
#include "train/atomic_file.h"
#include "train/lm_tokenizer.h"
#include "train/trainer/lm_trainer.h"

using namespace qkv;
using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;

namespace {

// Sentences from a small set in a seeded random order: predictable within a sentence, not across.
std::string structured_text(size_t bytes) {
  const std::vector<std::string> s = {"the cat sat on the mat. ", "a dog ran in the park. ",
                                      "we like green tea. ",      "my hat is red. ",
                                      "birds sing at dawn. ",     "the sun is hot. "};
  std::mt19937 rng(1);
  std::string text;
  while (text.size() < bytes) text += s[rng() % s.size()];
  return text;
}

double unigram_bits(const std::string& text) {
  std::map<char, double> counts;
  for (char c : text) ++counts[c];
  double h = 0;
  for (auto& [c, n] : counts) h -= n / double(text.size()) * std::log2(n / double(text.size()));
  return h;
}

LmTrainConfig tiny(const std::string& data) {
  LmTrainConfig c;
  c.data = data;
  c.model = {.context = 32,
             .d_model = 48,
             .num_heads = 4,
             .num_layers = 2,
             .dim_feedforward = 96,
             .dropout = 0,
             .positions = "learned"};
  c.batch_size = 16;
  c.steps = 300;
  c.lr = 3e-3;
  c.min_lr = 3e-4;
  c.warmup_steps = 20;
  c.eval_every = 100;
  c.eval_windows = 32;
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lm_trainer)

BOOST_AUTO_TEST_CASE(char_model_learns_far_below_the_unigram_entropy) {
  ScratchDir dir("lm_train_char");
  const std::string text = structured_text(20000);
  { std::ofstream(dir.file("corpus.txt")) << text; }
  LmTrainResult r = train_lm(tiny(dir.file("corpus.txt")), dir.file("run"));
  BOOST_REQUIRE_EQUAL(r.evaluations.size(), 4u);  // steps 0, 100, 200, 300
  BOOST_CHECK_EQUAL(r.unit, "character");
  const LmEvaluation &first = r.evaluations.front(), &last = r.evaluations.back();
  // GPT-2's small initial weights: close to uniform over the vocabulary at step 0.
  BOOST_CHECK_LT(std::abs(first.loss - std::log(double(r.vocab))), 0.1);
  const double h = unigram_bits(text.substr(0, 18000));
  BOOST_TEST_MESSAGE("unigram " << h << " bits/char; after 300 steps " << last.bits_per_unit
                                << " bits/char, " << last.tokens_per_second << " tokens/s");
  BOOST_CHECK_LT(last.bits_per_unit, 0.5 * h);
  // One token per character: bits per character is the loss in bits; perplexity its exp.
  BOOST_CHECK_CLOSE(last.bits_per_unit, last.loss / std::log(2.0), 1e-9);
  BOOST_CHECK_CLOSE(last.perplexity, std::exp(last.loss), 1e-9);
  BOOST_CHECK_GT(last.tokens_per_second, 0);

  for (const char* f : {"tokenizer.json", "lm_config.json", "metrics.jsonl", "model.safetensors"})
    BOOST_CHECK_MESSAGE(std::filesystem::exists(dir.path / "run" / f), f);
  std::string metrics = read_file(dir.file("run/metrics.jsonl"));
  BOOST_CHECK_EQUAL(std::count(metrics.begin(), metrics.end(), '\n'), 4);
  BOOST_CHECK_NE(metrics.find("\"bits_per_character\""), std::string::npos);
  BOOST_CHECK_EQUAL(load_lm_tokenizer(dir.file("run/tokenizer.json"))->vocab_size(), r.vocab);
}

BOOST_AUTO_TEST_CASE(bpe_model_reports_bits_per_byte) {
  ScratchDir dir("lm_train_bpe");
  const std::string text = structured_text(12000);
  { std::ofstream(dir.file("corpus.txt")) << text; }
  LmTrainConfig c = tiny(dir.file("corpus.txt"));
  c.tokenizer = "bpe";
  c.vocab_size = 300;
  c.steps = 60;
  c.eval_every = 60;
  c.model.positions = "rope";
  LmTrainResult r = train_lm(c, dir.file("run"));
  BOOST_CHECK_EQUAL(r.unit, "byte");
  BOOST_CHECK_GT(r.vocab, 256);
  // Tokens stand for several bytes each, so the validation split has fewer tokens than bytes,
  // and bits per byte is the loss in bits per token divided by the bytes per token.
  BOOST_CHECK_LT(r.valid_tokens, 1200);
  const LmEvaluation& last = r.evaluations.back();
  BOOST_CHECK_LT(last.bits_per_unit, last.loss / std::log(2.0) / 1.5);
  BOOST_CHECK_LT(last.loss, r.evaluations.front().loss - 1.0);
}

BOOST_AUTO_TEST_CASE(bad_configs_name_the_option_and_short_data_the_file) {
  ScratchDir dir("lm_train_bad");
  { std::ofstream(dir.file("short.txt")) << "abcdefghijklmnopqrstuvwxyz0123456789"; }
  LmTrainConfig c = tiny(dir.file("short.txt"));
  BOOST_CHECK_EXCEPTION(train_lm(c, dir.file("run")), Error,
                        message_has("short.txt: training split", "--context"));
  c.tokenizer = "words";
  BOOST_CHECK_EXCEPTION(train_lm(c, dir.file("run")), Error, message_has("--tokenizer"));
  c = tiny(dir.file("short.txt")), c.batch_size = 0;
  BOOST_CHECK_EXCEPTION(train_lm(c, dir.file("run")), Error, message_has("--batch-size"));
}

BOOST_AUTO_TEST_SUITE_END()
