#include <boost/test/unit_test.hpp>
#include <fstream>

#include "helpers.h"
#include "train/atomic_file.h"
#include "train/tokenizer.h"

using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;

BOOST_AUTO_TEST_SUITE(tokenizer)

BOOST_AUTO_TEST_CASE(tokenize_by_character_and_whitespace) {
  BOOST_TEST(
      (tokenize("ab c", TokenizerKind::character) == std::vector<std::string>{"a", "b", " ", "c"}));
  BOOST_TEST((tokenize("  one  two\tthree ", TokenizerKind::whitespace) ==
              std::vector<std::string>{"one", "two", "three"}));
}

BOOST_AUTO_TEST_CASE(vocab_order_specials_and_min_frequency) {
  Vocab v = Vocab::build({"b a b", "c b a"}, TokenizerKind::whitespace, 2);
  // specials, then b (3 times), a (2 times); c (once) is below min_frequency.
  BOOST_TEST(v.size() == 6u);
  BOOST_TEST(v.token(Vocab::PAD) == "<pad>");
  BOOST_TEST(v.token(Vocab::UNK) == "<unk>");
  BOOST_TEST(v.id("b") == 4);
  BOOST_TEST(v.id("a") == 5);
  BOOST_TEST(v.id("c") == Vocab::UNK);
}

BOOST_AUTO_TEST_CASE(encode_decode_round_trip) {
  Vocab chars = Vocab::build({"2026-11-29", "sunday 29 november 2026"}, TokenizerKind::character);
  std::string text = "29 nov 2026";
  BOOST_TEST(chars.decode(chars.encode(text)) == text);
  Vocab words = Vocab::build({"one thousand forty seven"}, TokenizerKind::whitespace);
  BOOST_TEST(words.decode(words.encode("forty  one thousand")) == "forty one thousand");
  // decode skips BOS and PAD, stops at EOS, shows unknowns.
  std::vector<int64_t> ids = {Vocab::BOS, words.id("seven"), Vocab::UNK,
                              Vocab::EOS, words.id("one"),   Vocab::PAD};
  BOOST_TEST(words.decode(ids) == "seven <unk>");
}

BOOST_AUTO_TEST_CASE(save_and_load) {
  ScratchDir dir("vocab");
  Vocab v = Vocab::build({"hello world", "hello there"}, TokenizerKind::whitespace);
  v.save(dir.file("vocab.json"));
  Vocab w = Vocab::load(dir.file("vocab.json"));
  BOOST_TEST(w.size() == v.size());
  BOOST_TEST((w.kind() == TokenizerKind::whitespace));
  for (int64_t i = 0; i < int64_t(v.size()); ++i) BOOST_TEST(w.token(i) == v.token(i));
}

BOOST_AUTO_TEST_CASE(corrupt_files_are_clear_errors) {
  ScratchDir dir("vocab_bad");
  auto write = [&](const std::string& text) {
    write_file_atomic(dir.file("v.json"), text);
    return dir.file("v.json");
  };
  BOOST_CHECK_EXCEPTION(Vocab::load(dir.file("missing.json")), qkv::Error,
                        message_has("missing.json"));
  BOOST_CHECK_EXCEPTION(Vocab::load(write("{\"tokens\": [")), qkv::Error,
                        message_has("v.json", "not valid JSON"));
  BOOST_CHECK_EXCEPTION(Vocab::load(write("{\"tokens\": []}")), qkv::Error,
                        message_has("\"tokenizer\""));
  BOOST_CHECK_EXCEPTION(
      Vocab::load(
          write(R"({"tokenizer": "char", "tokens": ["<pad>", "<s>", "</s>", "<unk>", "a", "a"]})")),
      qkv::Error, message_has("'a' appears twice"));
  BOOST_CHECK_EXCEPTION(
      Vocab::load(write(R"({"tokenizer": "char", "tokens": ["<s>", "<pad>", "</s>", "<unk>"]})")),
      qkv::Error, message_has("token 0 must be <pad>"));
  BOOST_CHECK_EXCEPTION(
      Vocab::load(write(R"({"tokenizer": "bpe", "tokens": ["<pad>", "<s>", "</s>", "<unk>"]})")),
      qkv::Error, message_has("unknown tokenizer 'bpe'"));
  // Tokens its tokenizer could never produce, as when "tokenizer" is switched by hand.
  const std::string specials = R"("<pad>", "<s>", "</s>", "<unk>")";
  BOOST_CHECK_EXCEPTION(
      Vocab::load(write(R"({"tokenizer": "char", "tokens": [)" + specials + R"(, "a", "bc"]})")),
      qkv::Error, message_has("v.json", "token 5 'bc'", "not one character"));
  BOOST_CHECK_EXCEPTION(
      Vocab::load(write(R"({"tokenizer": "char", "tokens": [)" + specials + R"(, ""]})")),
      qkv::Error, message_has("v.json", "token 4 is empty"));
  BOOST_CHECK_EXCEPTION(Vocab::load(write(R"({"tokenizer": "whitespace", "tokens": [)" + specials +
                                          R"(, "a", " "]})")),
                        qkv::Error, message_has("v.json", "token 5 ' '", "holds whitespace"));
  BOOST_CHECK_EXCEPTION(
      Vocab::load(write(R"({"tokenizer": "char", "tokenizer": "whitespace", "tokens": [)" +
                        specials + "]}")),
      qkv::Error, message_has("v.json", "key 'tokenizer' appears twice"));
  // What the tokenizers produce loads: "\xc3\xa9" (e acute) is one character, and so is a space.
  const Vocab c = Vocab::load(
      write(R"({"tokenizer": "char", "tokens": [)" + specials + ", \"\xc3\xa9\", \" \"]}"));
  BOOST_TEST(c.encode("\xc3\xa9 ") == (std::vector<int64_t>{4, 5}));
  const Vocab w =
      Vocab::load(write(R"({"tokenizer": "whitespace", "tokens": [)" + specials + R"(, "ab"]})"));
  BOOST_TEST(w.encode("ab ab") == (std::vector<int64_t>{4, 4}));
}

BOOST_AUTO_TEST_SUITE_END()
