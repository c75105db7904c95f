// The language model's text file: the contiguous split, its errors, and the windows.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <set>

#include "engine/ops.h"
#include "helpers.h"
#include "train/lm_data.h"

using namespace qkv;
using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;

namespace {
std::string write(const ScratchDir& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir.file(name), std::ios::binary) << bytes;
  return dir.file(name);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(lm_data)

BOOST_AUTO_TEST_CASE(the_last_fraction_is_the_validation_split_cut_at_a_character) {
  ScratchDir dir("lm_split");
  std::string text;
  for (int i = 0; i < 100; ++i) text += "a";
  const std::string path = write(dir, "t.txt", text);
  LmText t = read_lm_text(path, 0.1);
  BOOST_CHECK_EQUAL(t.train.size(), 90u);
  BOOST_CHECK_EQUAL(t.valid.size(), 10u);
  BOOST_CHECK_EQUAL(t.train + t.valid, text);
  // A two-byte character straddling the cut at byte 90 (bytes 89..90) moves the cut back to 89.
  std::string wide = std::string(89, 'a') + "\xC3\xA9" + std::string(9, 'b');
  LmText w = read_lm_text(write(dir, "w.txt", wide), 0.1);
  BOOST_CHECK_EQUAL(w.train, std::string(89, 'a'));
  BOOST_CHECK_EQUAL(w.valid, "\xC3\xA9" + std::string(9, 'b'));
}

BOOST_AUTO_TEST_CASE(bad_files_name_the_file_and_what_is_wrong) {
  ScratchDir dir("lm_bad");
  BOOST_CHECK_EXCEPTION(read_lm_text(dir.file("missing.txt")), Error,
                        message_has("missing.txt", "no such file"));
  BOOST_CHECK_EXCEPTION(read_lm_text(write(dir, "empty.txt", "")), Error,
                        message_has("empty.txt", "empty"));
  BOOST_CHECK_EXCEPTION(read_lm_text(write(dir, "bad.txt", "hello\xFFworld")), Error,
                        message_has("bad.txt", "invalid UTF-8 at byte 5"));
  BOOST_CHECK_EXCEPTION(read_lm_text(write(dir, "cut.txt", "abc\xE6\x97")), Error,
                        message_has("cut.txt", "invalid UTF-8 at byte 3"));
  BOOST_CHECK_EXCEPTION(read_lm_text(write(dir, "one.txt", "x")), Error,
                        message_has("one.txt", "too few"));
  BOOST_CHECK_EXCEPTION(read_lm_text(write(dir, "ok.txt", "abcdef"), 1.0), Error,
                        message_has("--valid-fraction"));
  BOOST_CHECK_EXCEPTION(TokenWindows({1, 2, 3}, 3, "f.txt: training split"), Error,
                        message_has("f.txt: training split", "3 tokens", "= 4"));
}

BOOST_AUTO_TEST_CASE(random_windows_are_slices_from_the_seed_and_cover_every_start) {
  std::vector<int64_t> ids(50);
  for (int64_t i = 0; i < 50; ++i) ids[size_t(i)] = 100 + i;
  TokenWindows w(ids, 8, "ids");
  Generator g1(5), g2(5), g3(6);
  Tensor a = w.random_batch(400, g1), b = w.random_batch(400, g2), c = w.random_batch(400, g3);
  BOOST_CHECK_EQUAL(shape_str(a.shape()), "[400,9]");
  std::vector<int64_t> va = a.to_vector<int64_t>(), vb = b.to_vector<int64_t>(),
                       vc = c.to_vector<int64_t>();
  BOOST_CHECK(va == vb);
  BOOST_CHECK(va != vc);
  std::set<int64_t> starts;
  for (int64_t r = 0; r < 400; ++r) {
    int64_t s = va[size_t(r * 9)] - 100;
    for (int64_t k = 0; k < 9; ++k) BOOST_REQUIRE_EQUAL(va[size_t(r * 9 + k)], 100 + s + k);
    starts.insert(s);
  }
  // Every start 0..41 (42 of them: the last window ends at token 49), nothing past it.
  BOOST_CHECK_EQUAL(starts.size(), 42u);
  BOOST_CHECK_EQUAL(*starts.rbegin(), 41);
}

BOOST_AUTO_TEST_CASE(sequential_windows_make_every_token_a_target_once) {
  std::vector<int64_t> ids(20);
  for (int64_t i = 0; i < 20; ++i) ids[size_t(i)] = i;
  TokenWindows w(ids, 4, "ids");
  Tensor s = w.sequential_windows(100);
  BOOST_CHECK_EQUAL(shape_str(s.shape()), "[4,5]");  // (20 - 1) / 4 windows
  std::vector<int64_t> v = s.to_vector<int64_t>();
  BOOST_CHECK(v == std::vector<int64_t>(
                       {0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12, 12, 13, 14, 15, 16}));
  BOOST_CHECK_EQUAL(w.sequential_windows(2).size(0), 2);
}

BOOST_AUTO_TEST_SUITE_END()
