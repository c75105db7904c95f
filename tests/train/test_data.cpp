#include <sys/resource.h>
#include <zlib.h>

#include <boost/test/unit_test.hpp>
#include <fstream>
#include <set>

#include "helpers.h"
#include "train/data/idx.h"
#include "train/data/order_task.h"
#include "train/data/split.h"
#include "train/data/tsv.h"

using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;

namespace {

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// An IDX file of unsigned bytes, gzipped, as Fashion-MNIST ships them; `bytes` may differ from
// what dims promise, to make broken files.
void write_idx_gz(const std::string& path, std::vector<uint32_t> dims, std::vector<uint8_t> bytes,
                  uint8_t type = 0x08) {
  std::string out = {0, 0, char(type), char(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out += char((d >> shift) & 0xff);
  out.append(bytes.begin(), bytes.end());
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, out.data(), unsigned(out.size()));
  gzclose(f);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(data)

BOOST_AUTO_TEST_CASE(pairs_tsv) {
  ScratchDir dir("tsv");
  write_text(dir.file("pairs.tsv"), "hello\tbonjour\r\n\nthank you\tmerci beaucoup\n");
  auto pairs = read_pairs_tsv(dir.file("pairs.tsv"));
  BOOST_TEST(pairs.size() == 2u);
  BOOST_TEST(pairs[0].target == "bonjour");  // '\r' dropped
  BOOST_TEST(pairs[1].source == "thank you");
  BOOST_TEST(pairs[1].target == "merci beaucoup");

  write_text(dir.file("bad.tsv"), "a\tb\n\nno tab here\n");
  BOOST_CHECK_EXCEPTION(read_pairs_tsv(dir.file("bad.tsv")), qkv::Error,
                        message_has("bad.tsv:3:", "no TAB"));
  BOOST_CHECK_EXCEPTION(read_pairs_tsv(dir.file("absent.tsv")), qkv::Error,
                        message_has("absent.tsv", "cannot open"));
}

// Each of these could be read as some other data without a word: it is refused or mended.
BOOST_AUTO_TEST_CASE(tsv_files_that_would_be_misread_are_refused_or_mended) {
  // A byte-order mark is dropped, not made part of the first source (and so a token).
  auto pairs = parse_pairs_tsv(
      "\xEF\xBB\xBF"
      "abc\tcba\nxy\tyx\n",
      "bom.tsv");
  BOOST_TEST(pairs[0].source == "abc");
  BOOST_TEST(pairs[1].source == "xy");
  // Only the first line's BOM is one; anywhere else it is text, as the file says.
  BOOST_TEST(parse_pairs_tsv("a\tb\n\xEF\xBB\xBF"
                             "c\td\n",
                             "m.tsv")[1]
                 .source ==
             "\xEF\xBB\xBF"
             "c");
  BOOST_CHECK_EXCEPTION(parse_pairs_tsv("a\tb\nthank you\tmerci\tbeaucoup\n", "three.tsv"),
                        qkv::Error, message_has("three.tsv:2:", "more than two columns"));
  BOOST_CHECK_EXCEPTION(parse_classification_tsv("pos\tgood\tfilm\nneg\tbad\n", "three.tsv"),
                        qkv::Error, message_has("three.tsv:1:", "more than two columns"));
  BOOST_CHECK_EXCEPTION(parse_pairs_tsv("a\tb\nc\t   \n", "space.tsv"), qkv::Error,
                        message_has("space.tsv:2:", "empty target", "only spaces"));
  BOOST_CHECK_EXCEPTION(parse_pairs_tsv("  \tb\n", "space.tsv"), qkv::Error,
                        message_has("space.tsv:1:", "empty source"));
  BOOST_CHECK_EXCEPTION(parse_classification_tsv(" \tgood\nneg\tbad\n", "space.tsv"), qkv::Error,
                        message_has("space.tsv:1:", "empty label"));
  BOOST_CHECK_EXCEPTION(parse_pairs_tsv("a\tb\rc\td\re\tf\r", "mac.tsv"), qkv::Error,
                        message_has("mac.tsv:1:", "end in CR alone"));
  // Windows line ends stay fine.
  BOOST_TEST(parse_pairs_tsv("a\tb\r\nc\td\r\n", "win.tsv").size() == 2u);
}

BOOST_AUTO_TEST_CASE(classification_tsv) {
  ScratchDir dir("cls");
  write_text(dir.file("labels.tsv"), "pos\tgreat film\nneg\tdull\npos\tloved it\n");
  auto data = read_classification_tsv(dir.file("labels.tsv"));
  BOOST_TEST((data.labels == std::vector<std::string>{"neg", "pos"}));
  BOOST_TEST(data.examples[0].label == 1);
  BOOST_TEST(data.examples[1].label == 0);
  BOOST_TEST(data.examples[2].text == "loved it");
  write_text(dir.file("one.tsv"), "pos\tgreat\npos\tfine\n");
  BOOST_CHECK_EXCEPTION(read_classification_tsv(dir.file("one.tsv")), qkv::Error,
                        message_has("at least two labels"));
}

BOOST_AUTO_TEST_CASE(holdout_split_is_a_partition) {
  std::vector<int> items(50);
  for (int i = 0; i < 50; ++i) items[size_t(i)] = i;
  auto s = holdout_split(items, 5, 7, 3);
  BOOST_TEST(s.valid.size() == 5u);
  BOOST_TEST(s.test.size() == 7u);
  std::set<int> all(s.train.begin(), s.train.end());
  all.insert(s.valid.begin(), s.valid.end());
  all.insert(s.test.begin(), s.test.end());
  BOOST_TEST(all.size() == 50u);
  BOOST_CHECK_THROW(holdout_split(items, 30, 20, 3), qkv::Error);
}

BOOST_AUTO_TEST_CASE(order_task_labels_follow_the_first_marker) {
  auto s = make_order_task(300, 50, 50, 9);
  std::set<std::string> texts;
  int a_first = 0;
  for (const auto* split : {&s.train, &s.valid, &s.test})
    for (const auto& e : *split) {
      texts.insert(e.text);
      // Recompute the label from the words: which marker comes first.
      size_t a = (" " + e.text + " ").find(" A "), b = (" " + e.text + " ").find(" B ");
      BOOST_REQUIRE(a != std::string::npos && b != std::string::npos);
      BOOST_REQUIRE_EQUAL(e.label, a < b ? 0 : 1);
      a_first += e.label == 0;
    }
  BOOST_TEST(texts.size() == 400u);  // disjoint splits
  BOOST_TEST(a_first > 150);         // both labels common
  BOOST_TEST(a_first < 250);
}

BOOST_AUTO_TEST_CASE(idx_reader_reads_good_files) {
  ScratchDir dir("idx");
  std::vector<uint8_t> pixels(2 * 3 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 10);
  write_idx_gz(dir.file("images.gz"), {2, 3, 4}, pixels);
  IdxArray a = read_idx_gz(dir.file("images.gz"));
  BOOST_TEST((a.dims == std::vector<int64_t>{2, 3, 4}));
  BOOST_TEST(a.data == pixels);
}

BOOST_AUTO_TEST_CASE(idx_reader_rejects_bad_files) {
  ScratchDir dir("idx_bad");
  write_idx_gz(dir.file("short.gz"), {2, 3, 4}, std::vector<uint8_t>(23));
  BOOST_CHECK_EXCEPTION(read_idx_gz(dir.file("short.gz")), qkv::Error,
                        message_has("short.gz", "truncated"));
  write_idx_gz(dir.file("long.gz"), {2, 2}, std::vector<uint8_t>(5));
  BOOST_CHECK_EXCEPTION(read_idx_gz(dir.file("long.gz")), qkv::Error, message_has("more data"));
  write_idx_gz(dir.file("float.gz"), {2}, std::vector<uint8_t>(8), 0x0D);
  BOOST_CHECK_EXCEPTION(read_idx_gz(dir.file("float.gz")), qkv::Error, message_has("type code 13"));
  write_text(dir.file("text.gz"), "this is not an idx file");
  BOOST_CHECK_EXCEPTION(read_idx_gz(dir.file("text.gz")), qkv::Error,
                        message_has("not an IDX file"));
  BOOST_CHECK_EXCEPTION(read_idx_gz(dir.file("none.gz")), qkv::Error,
                        message_has("none.gz", "no such file"));
}

BOOST_AUTO_TEST_CASE(fashion_mnist_from_a_small_folder) {
  ScratchDir dir("fashion");
  write_idx_gz(dir.file("t10k-images-idx3-ubyte.gz"), {3, 2, 2},
               {0, 255, 0, 255, 1, 2, 3, 4, 5, 6, 7, 8});
  write_idx_gz(dir.file("t10k-labels-idx1-ubyte.gz"), {3}, {9, 0, 4});
  ImageDataset d = load_fashion_mnist("test", dir.path.string());
  BOOST_TEST(d.count == 3);
  BOOST_TEST(d.class_names[size_t(d.labels[0])] == "ankle boot");
  qkv::Tensor x = images_tensor(d, {0});
  BOOST_TEST((x.shape() == qkv::Shape{1, 1, 2, 2}));
  BOOST_TEST(x.to_vector<float>()[1] == 1.0f);
  BOOST_TEST((labels_tensor(d, {2, 1}).to_vector<int64_t>() == std::vector<int64_t>{4, 0}));

  write_idx_gz(dir.file("t10k-labels-idx1-ubyte.gz"), {2}, {9, 0});
  BOOST_CHECK_EXCEPTION(load_fashion_mnist("test", dir.path.string()), qkv::Error,
                        message_has("3 images but 2 labels"));
  BOOST_CHECK_EXCEPTION(load_fashion_mnist("train", dir.path.string()), qkv::Error,
                        message_has("make deps DATA=fashion-mnist", "train-images"));
}

// Peak resident memory of this process so far, in MiB.
static long peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024;
}

// A 15-byte file whose header promises 32768 x 65536 bytes must fail before the reader allocates
// (and zeroes) 2 GiB (a regression input in tests/fuzz/corpus/idx/ replays it).
BOOST_AUTO_TEST_CASE(idx_header_promising_gigabytes_fails_without_allocating_them) {
  std::string header = {0, 0, 8, 2, 0, 0, char(0x80), 0, 0, 1, 0, 0};  // [32768, 65536]
  const long before = peak_rss_mib();
  BOOST_CHECK_EXCEPTION(parse_idx_gz(header + "abc", "huge.gz"), qkv::Error,
                        message_has("huge.gz", "truncated", "2147483648 bytes"));
  BOOST_TEST(peak_rss_mib() - before < 256);
}

BOOST_AUTO_TEST_CASE(idx_and_tsv_parse_from_memory) {
  std::string plain = {0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9};
  IdxArray a = parse_idx_gz(plain, "labels");
  BOOST_TEST((a.dims == std::vector<int64_t>{3}));
  BOOST_TEST((a.data == std::vector<uint8_t>{7, 8, 9}));
  BOOST_CHECK_EXCEPTION(parse_idx_gz(plain + "x", "labels.gz"), qkv::Error,
                        message_has("labels.gz", "more data"));
  auto pairs = parse_pairs_tsv("a\tb\n", "mem.tsv");
  BOOST_TEST(pairs.size() == 1u);
  BOOST_CHECK_EXCEPTION(parse_classification_tsv("x\tone\n", "mem.tsv"), qkv::Error,
                        message_has("mem.tsv", "at least two labels"));
}

BOOST_AUTO_TEST_SUITE_END()
