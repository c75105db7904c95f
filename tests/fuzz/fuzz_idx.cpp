// train/data/idx: a gzipped (or plain) IDX file of Fashion-MNIST. A file that loads holds exactly
// as many bytes as its dimensions promise.
#include "tests/fuzz/fuzz_support.h"
#include "train/data/idx.h"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  train::IdxArray a;
  if (!fuzz::accepts("images.gz",
                     [&] { a = train::parse_idx_gz(fuzz::as_text(data, size), "images.gz"); }))
    return 0;
  FUZZ_CHECK(a.dims.size() >= 1 && a.dims.size() <= 4);
  size_t numel = 1;
  for (int64_t d : a.dims) {
    FUZZ_CHECK(d > 0);
    numel *= size_t(d);
  }
  FUZZ_CHECK(a.data.size() == numel);
  return 0;
}
