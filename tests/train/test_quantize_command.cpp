// `qkv quantize` on a small trained translation run: the int8 file is written, is much smaller
// than the float32 checkpoint (embeddings and norms stay float32), holds int8 weights, and the
// model loaded from it translates about as well as the float32 one; `qkv eval --int8` without the
// file says how to make it.
#include <boost/test/unit_test.hpp>
#include <filesystem>

#include "nn/safetensors.h"
#include "tests/train/helpers.h"
#include "train/commands/commands.h"
#include "train/commands/run_scoring.h"
#include "train/trainer/translation_trainer.h"

using namespace qkv;
using namespace qkv::train;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_SUITE(quantize_command)

BOOST_AUTO_TEST_CASE(quantizing_a_run_keeps_its_accuracy_in_under_half_the_bytes) {
  test::ScratchDir dir("quantize");
  Config c;
  c.task = "copy";
  c.train_size = 2000, c.valid_size = 50, c.test_size = 100;
  c.min_length = 3, c.max_length = 6;
  c.d_model = 64, c.heads = 4, c.layers = 1, c.ff_dim = 128, c.dropout = 0;
  c.batch_size = 32, c.steps = 300, c.eval_every = 300, c.log_every = 100;
  c.lr = 3e-3, c.warmup = 30, c.threads = 1, c.pictures = false;
  c.out = dir.file("run");
  const double fp32 = train_translation(c).test_exact_match;

  BOOST_CHECK_EXCEPTION(cli::eval_command({.run = c.out, .int8 = true}), Error,
                        test::message_has("qkv quantize --run"));
  BOOST_REQUIRE_EQUAL(cli::quantize_command({.run = c.out, .latency_examples = 5}), 0);
  const std::string int8_file = c.out + "/" + cli::kInt8ModelFile;
  BOOST_REQUIRE(fs::exists(int8_file));
  BOOST_TEST(fs::file_size(int8_file) < fs::file_size(c.out + "/model.safetensors") / 2);
  auto tensors = nn::load_safetensors(int8_file).tensors;
  BOOST_TEST((tensors.at("generator.weight_int8").dtype() == DType::i8));

  Translator t = load_translator(c.out);
  cli::load_int8_model(*t.model, c.out);
  TranslationData data = prepare_translation_data(t.config);
  const double int8 = cli::translation_exact_match(t, data, 1).fraction();
  BOOST_TEST_MESSAGE("copy task exact match: float32 " << fp32 << ", int8 " << int8);
  BOOST_TEST(fp32 > 0.5);  // the model learned something worth quantizing
  BOOST_TEST(std::abs(int8 - fp32) <= 0.05);
}

BOOST_AUTO_TEST_SUITE_END()
