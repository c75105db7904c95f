// The language model's tokenizers: byte-level BPE (merges counted by hand, round trips of random
// Unicode never seen in training, the saved file) and the code point tokenizer (unknown
// characters refused or mapped to <unk>).
#include <boost/test/unit_test.hpp>
#include <random>

#include "helpers.h"
#include "train/bpe_tokenizer.h"
#include "train/char_tokenizer.h"
#include "train/utf8.h"

using namespace qkv;
using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;

namespace {

// A random valid UTF-8 string: code points from ASCII, Latin, CJK, emoji and the edges of each
// encoded length (U+007F, U+0080, U+07FF, U+0800, U+FFFF, U+10000, U+10FFFF), never a surrogate.
std::string random_utf8(std::mt19937& rng, int length) {
  const uint32_t edges[] = {0x0,    0x7F,   0x80,   0x7FF,   0x800,
                            0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
  std::string s;
  for (int i = 0; i < length; ++i) {
    uint32_t cp;
    switch (rng() % 5) {
      case 0:
        cp = 0x20 + rng() % 0x5F;
        break;
      case 1:
        cp = 0x80 + rng() % 0x780;
        break;
      case 2:
        cp = 0x4E00 + rng() % 0x5000;
        break;
      case 3:
        cp = 0x1F300 + rng() % 0x300;
        break;
      default:
        cp = edges[rng() % 10];
        break;
    }
    if (cp < 0x80) {
      s += char(cp);
    } else if (cp < 0x800) {
      s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)),
          s += char(0x80 | (cp & 0x3F));
    } else {
      s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F));
      s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
    }
  }
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lm_tokenizers)

BOOST_AUTO_TEST_CASE(bpe_chunks_keep_a_leading_space_with_its_word) {
  std::vector<std::string_view> c = bpe_chunks("Hello, world!  ok\n\nx");
  std::vector<std::string> got(c.begin(), c.end());
  BOOST_CHECK(got ==
              std::vector<std::string>({"Hello", ",", " world", "!", " ", " ok", "\n\n", "x"}));
}

BOOST_AUTO_TEST_CASE(bpe_merges_the_most_frequent_pair_with_the_smallest_pair_on_ties) {
  BpeTokenizer t = BpeTokenizer::train("abab abab abab cdcd cdcd cdcd", 300);
  // The chunks are "abab", " abab" (x2), " cdcd" (x3): the space pairs (32, a) x2 and (32, c) x3.
  // Counts: ab 6, ba 3, (32,a) 2, cd 6, dc 3, (32,c) 3 -> ab; then cd; then (256,256) 3,
  // (32,256) 2, (32,257) 3, (257,257) 3 -> (32, 257) is smallest among the 3s.
  const auto& m = t.merges();
  BOOST_REQUIRE_GE(m.size(), 3u);
  using Pair = std::pair<int64_t, int64_t>;
  BOOST_CHECK((m[0] == Pair{97, 98}));
  BOOST_CHECK((m[1] == Pair{99, 100}));
  BOOST_CHECK((m[2] == Pair{32, 257}));
  BOOST_CHECK_EQUAL(t.piece(258), " cd");
  // It stops when no pair occurs twice, below the asked-for size.
  BOOST_CHECK_LT(t.vocab_size(), 300);
  BOOST_CHECK_EXCEPTION(BpeTokenizer::train("abc", 100), Error, message_has("--vocab-size"));
}

BOOST_AUTO_TEST_CASE(bpe_round_trips_random_unicode_never_seen_in_training) {
  std::string training;
  for (int i = 0; i < 200; ++i) training += "the cat sat on the mat; a cat is not a mat. ";
  BpeTokenizer t = BpeTokenizer::train(training, 400);
  // Every frequent chunk of the training text became one token.
  for (const char* chunk : {" the", " cat", " sat", " on", " mat", " a", " is", " not", ". "})
    BOOST_CHECK_MESSAGE(t.encode(chunk).size() == (std::string(chunk) == ". " ? 2u : 1u), chunk);
  std::mt19937 rng(17);
  for (int i = 0; i < 300; ++i) {
    std::string s = random_utf8(rng, 1 + int(rng() % 40));
    if (i % 3 == 0) s = "the cat " + s + " mat";
    BOOST_REQUIRE(is_valid_utf8(s));
    std::vector<int64_t> ids = t.encode(s);
    BOOST_REQUIRE_EQUAL(t.decode(ids), s);
    int64_t bytes = 0;
    for (int64_t id : ids) bytes += t.units(id);
    BOOST_REQUIRE_EQUAL(bytes, int64_t(s.size()));
  }
  // Any bytes at all, even invalid UTF-8.
  std::string raw = "\xFF\xFE\x00\x80 cat";
  raw += std::string(1, '\0');
  BOOST_CHECK_EQUAL(t.decode(t.encode(raw)), raw);
}

BOOST_AUTO_TEST_CASE(bpe_file_saves_and_loads_the_same_tokenizer_and_bad_files_are_named) {
  ScratchDir dir("bpe_file");
  BpeTokenizer t = BpeTokenizer::train("low lower lowest newer newest wider widest", 280);
  save_lm_tokenizer(t, dir.file("tokenizer.json"));
  auto loaded = load_lm_tokenizer(dir.file("tokenizer.json"));
  BOOST_CHECK_EQUAL(loaded->kind(), "bpe");
  BOOST_CHECK_EQUAL(loaded->vocab_size(), t.vocab_size());
  BOOST_CHECK(loaded->encode("the lowest newer") == t.encode("the lowest newer"));
  const std::string src = "run/tokenizer.json";
  BOOST_CHECK_EXCEPTION(
      BpeTokenizer::from_json(R"({"format":"qkv-bpe","version":2,"merges":[]})", src), Error,
      message_has(src, "'version'"));
  BOOST_CHECK_EXCEPTION(
      BpeTokenizer::from_json(
          R"({"format":"qkv-bpe","version":1,"vocab_size":257,"merges":[[1,256]]})", src),
      Error, message_has(src, "'merges'[0]"));
  BOOST_CHECK_EXCEPTION(
      BpeTokenizer::from_json(
          R"({"format":"qkv-bpe","version":1,"vocab_size":300,"merges":[[1,2]]})", src),
      Error, message_has(src, "'vocab_size'"));
  BOOST_CHECK_EXCEPTION(lm_tokenizer_from_json(R"({"format":"gpt2"})", src), Error,
                        message_has(src, "'format'"));
  BOOST_CHECK_EXCEPTION(lm_tokenizer_from_json("{", src), Error, message_has(src, "not JSON"));
}

BOOST_AUTO_TEST_CASE(char_tokenizer_round_trips_known_text_and_refuses_unknown_characters) {
  CharTokenizer t = CharTokenizer::train("héllo 日本 wörld");
  // <unk> + the 11 distinct code points, in code point order.
  BOOST_CHECK_EQUAL(t.vocab_size(), 12);
  BOOST_CHECK(t.encode(" d") == std::vector<int64_t>({1, 2}));
  std::mt19937 rng(3);
  const std::vector<std::string> alphabet = {"h",  "é", "l", "o", " ", "日",
                                             "本", "w", "ö", "r", "d"};
  for (int i = 0; i < 100; ++i) {
    std::string s;
    for (int k = 0; k < 30; ++k) s += alphabet[rng() % alphabet.size()];
    BOOST_REQUIRE_EQUAL(t.decode(t.encode(s)), s);
  }
  BOOST_CHECK_EXCEPTION(t.encode("hol€"), Error, message_has("U+20AC", "at byte 3"));
  BOOST_CHECK(t.encode("h€", true) == std::vector<int64_t>({t.encode("h")[0], CharTokenizer::UNK}));
  BOOST_CHECK_EQUAL(t.decode({CharTokenizer::UNK}), "\xEF\xBF\xBD");
  BOOST_CHECK_EXCEPTION(t.encode("h\xC3"), Error, message_has("invalid UTF-8 at byte 1"));

  ScratchDir dir("char_file");
  save_lm_tokenizer(t, dir.file("tokenizer.json"));
  auto loaded = load_lm_tokenizer(dir.file("tokenizer.json"));
  BOOST_CHECK_EQUAL(loaded->kind(), "char");
  BOOST_CHECK(loaded->encode("wörld 日本") == t.encode("wörld 日本"));
  BOOST_CHECK_EXCEPTION(
      CharTokenizer::from_json(R"({"format":"qkv-char","version":1,"characters":["a","bc"]})", "f"),
      Error, message_has("f: key 'characters'[1]", "one character"));
  BOOST_CHECK_EXCEPTION(
      CharTokenizer::from_json(R"({"format":"qkv-char","version":1,"characters":["a","a"]})", "f"),
      Error, message_has("f: key 'characters'[1]", "repeats"));
}

BOOST_AUTO_TEST_SUITE_END()
