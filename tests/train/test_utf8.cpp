// UTF-8 validity and splitting (train/utf8.h), and what rests on them: the character tokenizer
// keeps a multi-byte character whole, so a vocabulary built from non-ASCII text can be saved (its
// file is JSON); data files and command-line text that are not UTF-8 are refused clearly.
#include <boost/test/unit_test.hpp>
#include <random>

#include "helpers.h"
#include "train/config.h"
#include "train/data/tsv.h"
#include "train/tokenizer.h"
#include "train/utf8.h"

using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;

namespace {

// The reference encoder: the bit layout of the standard, one branch per length.
std::string encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(utf8)

BOOST_AUTO_TEST_CASE(every_code_point_and_the_malformed_sequences) {
  int64_t wrong = 0, first_wrong = -1;  // counted, not asserted one by one: 1.1 M code points
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    const std::string s = encode(cp);
    const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    const bool ok = is_valid_utf8(s) == !surrogate &&
                    (surrogate || split_utf8(s) == std::vector<std::string>{s});
    if (!ok && wrong++ == 0) first_wrong = cp;
  }
  BOOST_CHECK_MESSAGE(wrong == 0,
                      wrong << " code points misjudged, first U+" << std::hex << first_wrong);
  for (const char* bad : {"\x80", "\xBF", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80",
                          "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF",
                          "\xC3", "\xE6\x97", "\xF0\x9F\x98", "a\xC3"})
    BOOST_CHECK_MESSAGE(!is_valid_utf8(bad), "accepted " << bad);
}

BOOST_AUTO_TEST_CASE(splitting_keeps_every_byte_in_order) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = int(rng() % 12);
    for (int i = 0; i < n; ++i)
      text += rng() % 2 ? encode(rng() % 0x110000 & ~0x800u) : std::string(1, char(rng()));
    std::string joined;
    bool pieces_valid = true;
    for (const std::string& piece : split_utf8(text)) {
      joined += piece;
      pieces_valid = pieces_valid && is_valid_utf8(piece);
      BOOST_REQUIRE(piece.size() == 1 || is_valid_utf8(piece));  // only lone bytes may be bad
    }
    BOOST_REQUIRE(joined == text);
    BOOST_REQUIRE_EQUAL(pieces_valid, is_valid_utf8(text));
  }
}

BOOST_AUTO_TEST_CASE(padding_counts_characters_not_bytes) {
  // "café" is 5 bytes, "日本" 6: padded to 6 characters they get 2 and 4 spaces.
  BOOST_CHECK_EQUAL(pad_right("caf\xc3\xa9", 6), "caf\xc3\xa9  ");
  BOOST_CHECK_EQUAL(pad_right("\xe6\x97\xa5\xe6\x9c\xac", 6), "\xe6\x97\xa5\xe6\x9c\xac    ");
  BOOST_CHECK_EQUAL(pad_right("abc", 3), "abc");
  BOOST_CHECK_EQUAL(pad_right("abcdef", 3), "abcdef");  // never cut
  BOOST_CHECK_EQUAL(pad_right("", 2), "  ");
}

BOOST_AUTO_TEST_CASE(non_ascii_text_tokenizes_by_character_and_its_vocab_saves) {
  BOOST_TEST((tokenize("né 日", TokenizerKind::character) ==
              std::vector<std::string>{"n", "é", " ", "日"}));
  ScratchDir dir("utf8_vocab");
  Vocab v = Vocab::build({"café crème", "日本語"}, TokenizerKind::character);
  v.save(dir.file("vocab.json"));  // "é" stays one token, or the JSON library would throw
  Vocab w = Vocab::load(dir.file("vocab.json"));
  BOOST_TEST(w.size() == v.size());
  BOOST_TEST(w.decode(w.encode("crème 日本")) == "crème 日本");
}

BOOST_AUTO_TEST_CASE(text_that_is_not_utf8_is_refused_clearly) {
  BOOST_CHECK_EXCEPTION(parse_pairs_tsv("a\tb\nc\xC3\td\n", "pairs.tsv"), qkv::Error,
                        message_has("pairs.tsv:2", "not valid UTF-8"));
  BOOST_CHECK_EXCEPTION(parse_classification_tsv("x\tone\ny\t\xFFtwo\n", "labels.tsv"), qkv::Error,
                        message_has("labels.tsv:2", "not valid UTF-8"));
  Config config;
  BOOST_CHECK_EXCEPTION(set_config_value(config, "out", "\xF0runs/x", "command line"), qkv::Error,
                        message_has("command line", "'out'", "not valid UTF-8"));
  set_config_value(config, "out", "runs/café", "command line");
  BOOST_TEST(config.out == "runs/café");
}

BOOST_AUTO_TEST_SUITE_END()
