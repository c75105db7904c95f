// The classification trainer end to end: the order task with a tiny transformer (the loss falls,
// the run folder is complete, a resumed run continues the same loss curve, `eval` rebuilds the
// model from the folder), and the image path on a small synthetic IDX set written here.
#include <zlib.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/error.h"
#include "tests/train/helpers.h"
#include "tests/train/tiny_runs.h"
#include "train/config.h"
#include "train/trainer/classification_pictures.h"
#include "train/trainer/classification_trainer.h"
#include "train/trainer/classifier.h"

using namespace qkv;
using namespace qkv::train;
using qkv::train::test::loss_curve;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

double mean_loss(const std::vector<std::pair<int64_t, double>>& curve, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += curve[i].second;
  return sum / double(to - from);
}

void write_idx_gz(const std::string& path, std::vector<uint32_t> dims,
                  const std::vector<uint8_t>& bytes) {
  std::string out = {0, 0, 0x08, char(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out += char((d >> shift) & 0xff);
  out.append(bytes.begin(), bytes.end());
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, out.data(), unsigned(out.size()));
  gzclose(f);
}

// 12x12 noisy images of two classes: label 0 has a bright top half, label 1 a bright bottom half.
void write_images(const std::string& dir, const std::string& prefix, uint32_t count,
                  uint64_t seed) {
  std::mt19937 gen{uint32_t(seed)};
  std::vector<uint8_t> pixels, labels;
  for (uint32_t i = 0; i < count; ++i) {
    uint8_t label = uint8_t(i % 2);
    labels.push_back(label);
    for (int y = 0; y < 12; ++y)
      for (int x = 0; x < 12; ++x) {
        bool bright = (y < 6) == (label == 0);
        pixels.push_back(uint8_t((bright ? 120 : 0) + int(gen() % 100)));
      }
  }
  write_idx_gz(dir + "/" + prefix + "-images-idx3-ubyte.gz", {count, 12, 12}, pixels);
  write_idx_gz(dir + "/" + prefix + "-labels-idx1-ubyte.gz", {count}, labels);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(classification_trainer)

BOOST_AUTO_TEST_CASE(order_task_loss_falls_and_the_run_folder_is_complete) {
  ScratchDir dir("cls_order");
  std::string run = dir.file("run");
  Config c = test::tiny_order_curve(run, 40);
  c.pictures = true;
  TrainResult r = train_classification(c);
  BOOST_CHECK_EQUAL(r.steps, 40);
  auto curve = loss_curve(run);
  BOOST_REQUIRE_EQUAL(curve.size(), 40u);
  // Chance is ln 2 = 0.69 (and a bag of words cannot beat it): below 0.6 the model has learned
  // something about the order; one layer cannot in 40 steps, two can (first A vs first B).
  BOOST_TEST_MESSAGE("order loss: first five " << mean_loss(curve, 0, 5) << ", last five "
                                               << mean_loss(curve, 35, 40));
  BOOST_CHECK_LT(mean_loss(curve, 35, 40), 0.6);
  BOOST_CHECK_GT(r.test_accuracy, 0.7);
  for (const char* f : {"config.json", "metrics.jsonl", "log.txt", "model.safetensors",
                        "optimizer.safetensors", "trainer_state.json", "model.json", "vocab.json",
                        "loss.png", "attention/encoder.0.self.png"})
    BOOST_CHECK_MESSAGE(fs::exists(run + "/" + f), "missing " << f);
  // the folder alone rebuilds the model, and it scores what the trainer reported
  Classifier k = load_classifier(run);
  BOOST_CHECK_EQUAL(k.architecture(), "TransformerClassifier");
  ClassificationSet data = prepare_classification_set(k.config);
  BOOST_CHECK_EQUAL(k.accuracy(data, data.test), r.test_accuracy);
}

BOOST_AUTO_TEST_CASE(a_resumed_run_continues_the_same_curve) {
  ScratchDir dir("cls_resume");
  std::string whole = dir.file("whole"), split = dir.file("split");
  train_classification(test::tiny_order_curve(whole, 30));
  train_classification(test::tiny_order_curve(split, 20));
  train_classification(test::tiny_order_curve(split, 30), /*resume=*/true);
  auto a = loss_curve(whole), b = loss_curve(split);
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    BOOST_CHECK_EQUAL(a[i].first, b[i].first);
    BOOST_CHECK_MESSAGE(a[i].second == b[i].second,
                        "step " << a[i].first << ": " << a[i].second << " vs " << b[i].second);
  }
}

BOOST_AUTO_TEST_CASE(images_train_a_cnn_with_cbam_and_a_vit) {
  ScratchDir dir("cls_images");
  write_images(dir.path.string(), "train", 240, 1);
  write_images(dir.path.string(), "t10k", 40, 2);
  Config c = test::tiny_order_curve(dir.file("cnn"), 80);
  c.task = "fashion-mnist", c.data = dir.path.string();
  c.train_size = 200, c.valid_size = 40, c.test_size = 40;
  c.channels = "4,8", c.attention = "cbam", c.pictures = true;
  TrainResult cnn = train_classification(c);
  BOOST_CHECK_GE(cnn.test_accuracy, 0.9);  // the halves differ by 120 grey levels
  BOOST_CHECK(fs::exists(dir.file("cnn/cbam_block0.png")));
  BOOST_CHECK(fs::exists(dir.file("cnn/cbam_block1.png")));
  BOOST_CHECK_EQUAL(load_classifier(dir.file("cnn")).architecture(), "CnnClassifier");
  // `qkv attention` on an image run: the pictures of another test image differ from image 0's
  {
    Classifier k = load_classifier(dir.file("cnn"));
    ClassificationSet set = prepare_classification_set(k.config);
    auto paths = write_classifier_pictures(k, set, set.test, 5, "test image 5", dir.file("pick"));
    BOOST_CHECK_EQUAL(paths.size(), 2u);
    BOOST_CHECK(read_bytes(dir.file("pick/cbam_block0.png")) !=
                read_bytes(dir.file("cnn/cbam_block0.png")));
    BOOST_CHECK_EXCEPTION(write_classifier_pictures(k, set, set.test, 40, "", dir.file("pick")),
                          qkv::Error, message_has("example 40 is out of range (40 examples)"));
  }

  c.out = dir.file("se"), c.attention = "se";
  train_classification(c);
  BOOST_CHECK(fs::exists(dir.file("se/se_block1.png")));

  c.out = dir.file("vit"), c.model = "vit", c.patch_size = 4;
  TrainResult vit = train_classification(c);
  BOOST_CHECK_GE(vit.test_accuracy, 0.9);
  BOOST_CHECK(fs::exists(dir.file("vit/attention/encoder.0.self.png")));

  c.out = dir.file("vit5"), c.patch_size = 5;  // (a fresh folder: "vit" holds a run)
  BOOST_CHECK_EXCEPTION(train_classification(c), qkv::Error, message_has("does not divide"));
}

BOOST_AUTO_TEST_CASE(translation_tasks_are_refused) {
  ScratchDir dir("cls_bad");
  Config c = test::tiny_order_curve(dir.file("run"), 5);
  c.task = "dates";
  BOOST_CHECK_EXCEPTION(train_classification(c), qkv::Error, message_has("train translate"));
  c.task = "order";
  // Resuming a folder that was never a run is refused before a folder is made.
  BOOST_CHECK_EXCEPTION(train_classification(c, /*resume=*/true), qkv::Error,
                        message_has("--resume", "is not a run folder"));
  BOOST_TEST(!fs::exists(c.out));
}

// Other heads fit the same tensors. A resume that changes them, and a model.json
// edited to them, are refused; an allowed change is recorded in config.json.
BOOST_AUTO_TEST_CASE(a_resume_or_model_json_with_other_heads_is_refused) {
  ScratchDir dir("cls_heads");
  Config c = test::tiny_order_curve(dir.file("run"), 4);
  train_classification(c);
  Config other = c;
  other.heads = 4, other.steps = 6;
  BOOST_CHECK_EXCEPTION(train_classification(other, /*resume=*/true), qkv::Error,
                        message_has("--resume", "cannot change heads (2 -> 4)"));
  other = c;
  other.steps = 6, other.patience = 2;
  BOOST_TEST(train_classification(other, /*resume=*/true).steps == 6);
  BOOST_TEST(load_config(c.out + "/config.json").resume_history.size() == 2u);

  const std::string path = c.out + "/model.json";
  nlohmann::json j = nlohmann::json::parse(read_bytes(path));
  j["config"]["num_heads"] = 4;
  std::ofstream(path) << j.dump(2);
  BOOST_CHECK_EXCEPTION(load_classifier(c.out), qkv::Error,
                        message_has("--run", "model.json", "num_heads 4 (config.json gives 2)"));
  other.steps = 8;
  BOOST_CHECK_EXCEPTION(train_classification(other, /*resume=*/true), qkv::Error,
                        message_has("--resume", "num_heads 4 (config.json gives 2)"));
}

BOOST_AUTO_TEST_SUITE_END()
