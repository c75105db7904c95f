// The trainers' optimizer: biases, norm weights and embedding tables in a group without weight
// decay, and an optimizer.safetensors of the single-group format (one global step count, the
// parameters numbered in model.parameters() order) that still resumes, continuing the same curve.
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/safetensors.h"
#include "tests/train/tiny_runs.h"
#include "train/trainer/checkpoint.h"
#include "train/trainer/optimizer_setup.h"
#include "train/trainer/translation_trainer.h"
#include "train/trainer/translator.h"

using namespace qkv;
using namespace qkv::train;
using qkv::train::test::losses;
namespace fs = std::filesystem;

namespace {

// The trainer tests' copy run, its weight decay on so that the groups differ.
Config tiny_copy_config(const std::string& out, int64_t steps) {
  Config c = test::tiny_copy_curve(out, steps);
  c.weight_decay = 0.05;
  return c;
}

std::string temp_run(const std::string& name) {
  std::string path = (fs::temp_directory_path() / ("qkv_optimizer_test_" + name)).string();
  fs::remove_all(path);
  return path;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_checkpoint)

BOOST_AUTO_TEST_CASE(the_trainers_optimizers_exempt_biases_norms_and_embeddings_from_decay) {
  for (const char* kind : {"adamw", "sgd"}) {
    Config c = tiny_copy_config("", 1);
    c.optimizer = kind;
    models::Seq2SeqTransformer model(seq2seq_config(c, 10, 12));
    auto opt = make_optimizer(c, model);
    const auto& groups = opt->param_groups();
    BOOST_REQUIRE_EQUAL(groups.size(), 2u);
    BOOST_CHECK_EQUAL(groups[0].weight_decay, 0.05);
    BOOST_CHECK_EQUAL(groups[1].weight_decay, 0.0);
    BOOST_CHECK_EQUAL(opt->params().size(), model.parameters().size());
    size_t decayed = 0;
    for (const auto& [name, p] : model.named_parameters()) {
      const bool table = name.ends_with("embed.weight");
      const bool exempt = p.dim() < 2 || table;
      bool in_rest = false;
      for (const Tensor& q : groups[1].params) in_rest = in_rest || q.impl() == p.impl();
      BOOST_CHECK_MESSAGE(in_rest == exempt, name << (exempt ? " decays" : " does not decay"));
      decayed += !exempt;
    }
    BOOST_CHECK_EQUAL(groups[0].params.size(), decayed);
    BOOST_CHECK_GT(decayed, 0u);
  }
}

BOOST_AUTO_TEST_CASE(a_single_group_checkpoint_resumes_the_same_curve) {
  std::string whole = temp_run("whole"), split = temp_run("split");
  train_translation(tiny_copy_config(whole, 30));
  train_translation(tiny_copy_config(split, 20));

  // Rewrite the checkpoint's optimizer state in the single-group format.
  Translator t = load_translator(split);
  auto opt = make_optimizer(tiny_copy_config(split, 30), *t.model);
  const std::string file = split + "/optimizer.safetensors";
  nn::TensorMap now = nn::load_safetensors(file).tensors, legacy;
  const std::vector<Tensor> order = t.model->parameters();
  size_t moved = 0;
  for (size_t j = 0; j < order.size(); ++j) {
    size_t i = 0;
    while (opt->params()[i].impl() != order[j].impl()) ++i;
    moved += i != j;
    BOOST_REQUIRE_EQUAL(now.at("state." + std::to_string(i) + ".step").item(), 20.0);
    for (const char* buffer : {"exp_avg", "exp_avg_sq"})
      legacy["state." + std::to_string(j) + "." + buffer] =
          now.at("state." + std::to_string(i) + "." + buffer);
  }
  BOOST_REQUIRE_GT(moved, 0u);  // the groups do reorder the parameters
  legacy["step"] = tensor_i64({20}, {1});
  legacy["lr"] = now.at("param_groups.0.lr");
  nn::save_safetensors(file, legacy);

  train_translation(tiny_copy_config(split, 30), /*resume=*/true);
  std::vector<double> a = losses(whole), b = losses(split);
  BOOST_REQUIRE_EQUAL(a.size(), 30u);
  BOOST_REQUIRE_EQUAL(b.size(), 30u);
  for (size_t s = 0; s < a.size(); ++s)
    BOOST_CHECK_MESSAGE(a[s] == b[s], "step " << s + 1 << ": " << a[s] << " vs " << b[s]);
  // The resumed run wrote the current format again.
  BOOST_CHECK(nn::load_safetensors(file).tensors.count("param_groups.1.params"));
  fs::remove_all(whole);
  fs::remove_all(split);
}

BOOST_AUTO_TEST_SUITE_END()
