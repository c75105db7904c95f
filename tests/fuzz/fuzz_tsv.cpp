// train/data/tsv: a user's pairs.tsv (translation) or labels.tsv (classification); every input is
// read both ways. What loads has no empty or all-space field, no TAB or CR inside a field, no
// byte-order mark, and no label id outside the label list.
#include <algorithm>

#include "tests/fuzz/fuzz_support.h"
#include "train/data/tsv.h"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  std::vector<train::Pair> pairs;
  if (fuzz::accepts("pairs.tsv", [&] { pairs = train::parse_pairs_tsv(text, "pairs.tsv"); })) {
    FUZZ_CHECK(!pairs.empty());
    FUZZ_CHECK(pairs[0].source.rfind("\xEF\xBB\xBF", 0) != 0);  // a BOM is not text
    for (const auto& p : pairs) {
      FUZZ_CHECK(!p.source.empty() && !p.target.empty());
      FUZZ_CHECK(p.source.find_first_of("\t\r\n") == std::string::npos);
      FUZZ_CHECK(p.target.find_first_of("\t\r\n") == std::string::npos);
      FUZZ_CHECK(p.source.find_first_not_of(' ') != std::string::npos);
      FUZZ_CHECK(p.target.find_first_not_of(' ') != std::string::npos);
    }
  }
  train::TextClassificationData d;
  if (fuzz::accepts("labels.tsv",
                    [&] { d = train::parse_classification_tsv(text, "labels.tsv"); })) {
    FUZZ_CHECK(d.labels.size() >= 2 && std::is_sorted(d.labels.begin(), d.labels.end()));
    FUZZ_CHECK(!d.examples.empty());
    for (const auto& e : d.examples) FUZZ_CHECK(e.label >= 0 && size_t(e.label) < d.labels.size());
  }
  return 0;
}
