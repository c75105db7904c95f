#include <boost/test/unit_test.hpp>
#include <fstream>
#include <set>

#include "helpers.h"
#include "train/dataset.h"

using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;

BOOST_AUTO_TEST_SUITE(dataset)

Config small(const std::string& task) {
  Config c;
  c.task = task;
  c.train_size = 300, c.valid_size = 40, c.test_size = 40;
  return c;
}

BOOST_AUTO_TEST_CASE(dates_become_encoded_splits_with_train_only_vocab) {
  TranslationData d = prepare_translation_data(small("dates"));
  BOOST_TEST(d.train.size() == 300u);
  BOOST_TEST(d.valid.size() == 40u);
  BOOST_TEST((d.target_vocab.kind() == TokenizerKind::character));
  // The ISO targets use digits and '-' only: 11 tokens besides the 4 specials.
  BOOST_TEST(d.target_vocab.size() == 15u);
  for (size_t i = 0; i < 10; ++i) {
    BOOST_TEST(d.target_vocab.decode(d.valid[i].tgt) == d.pairs.valid[i].target);
    BOOST_TEST(d.source_vocab.decode(d.train[i].src) == d.pairs.train[i].source);
  }
}

BOOST_AUTO_TEST_CASE(numbers_read_characters_and_write_words) {
  TranslationData d = prepare_translation_data(small("numbers"));
  BOOST_TEST((d.source_vocab.kind() == TokenizerKind::character));
  BOOST_TEST((d.target_vocab.kind() == TokenizerKind::whitespace));
  BOOST_TEST(d.source_vocab.size() == 14u);  // specials + ten digits
}

BOOST_AUTO_TEST_CASE(user_pairs_and_labels) {
  ScratchDir dir("dataset");
  {
    std::ofstream pairs(dir.file("pairs.tsv"));
    for (int i = 0; i < 30; ++i) pairs << "w" << i << " x\tx w" << i << "\n";
    std::ofstream labels(dir.file("labels.tsv"));
    for (int i = 0; i < 30; ++i) labels << (i % 2 ? "odd" : "even") << "\tnumber " << i << "\n";
  }
  Config c = small("pairs");
  c.valid_size = 5, c.test_size = 5, c.data = dir.file("pairs.tsv");
  TranslationData t = prepare_translation_data(c);
  BOOST_TEST(t.train.size() == 20u);
  BOOST_TEST((t.source_vocab.kind() == TokenizerKind::whitespace));
  // Words of valid/test lines never seen in train become <unk>: the vocab is train-only.
  std::set<std::string> train_words;
  for (const auto& p : t.pairs.train) train_words.insert(p.source.substr(0, p.source.find(' ')));
  const Pair& held_out = t.pairs.valid[0];
  BOOST_TEST(train_words.count(held_out.source.substr(0, held_out.source.find(' '))) == 0u);
  BOOST_TEST(t.valid[0].src[0] == Vocab::UNK);

  c.task = "classify", c.data = dir.file("labels.tsv");
  ClassificationData k = prepare_classification_data(c);
  BOOST_TEST((k.labels == std::vector<std::string>{"even", "odd"}));
  for (size_t i = 0; i < k.train.size(); ++i) {
    int n = std::stoi(k.train_texts[i].substr(7));
    BOOST_TEST(k.train[i].label == (n % 2 ? 1 : 0));
  }
  c.data = "";
  BOOST_CHECK_EXCEPTION(prepare_classification_data(c), qkv::Error, message_has("--data"));
}

BOOST_AUTO_TEST_CASE(order_task_and_wrong_kinds) {
  Config c = small("order");
  c.min_length = 24, c.max_length = 40;
  ClassificationData d = prepare_classification_data(c);
  BOOST_TEST(d.train.size() == 300u);
  BOOST_TEST(d.vocab.id("A") != Vocab::UNK);
  BOOST_CHECK_EXCEPTION(prepare_translation_data(c), qkv::Error, message_has("classification"));
  BOOST_CHECK_EXCEPTION(prepare_classification_data(small("dates")), qkv::Error,
                        message_has("translation task"));
  BOOST_CHECK_EXCEPTION(prepare_translation_data(small("dats")), qkv::Error,
                        message_has("unknown task 'dats'", "order"));
  BOOST_TEST((task_kind("fashion-mnist") == TaskKind::image_classification));
  BOOST_TEST((task_kind("sort") == TaskKind::translation));
  BOOST_CHECK_EXCEPTION(prepare_classification_data(small("fashion-mnist")), qkv::Error,
                        message_has("load_fashion_mnist"));
}

BOOST_AUTO_TEST_SUITE_END()
