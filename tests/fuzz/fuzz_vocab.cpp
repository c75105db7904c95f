// train/tokenizer: a run folder's vocabulary file (source_vocab.json, vocab.json). A vocabulary
// that loads maps each token to its own id and back, holds only tokens its tokenizer produces,
// writes out as a file that loads to the same vocabulary, and encodes any text (here the input
// itself) to ids it can decode.
#include "tests/fuzz/fuzz_support.h"
#include "train/tokenizer.h"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  train::Vocab vocab;
  if (!fuzz::accepts("vocab.json",
                     [&] { vocab = train::Vocab::from_json(std::string(text), "vocab.json"); }))
    return 0;
  for (int64_t id = 0; id < int64_t(vocab.size()); ++id) {
    FUZZ_CHECK(vocab.id(vocab.token(id)) == id);
    // Past the specials, each token is what its tokenizer makes of it: one token, itself.
    if (id > train::Vocab::UNK)
      FUZZ_CHECK(train::tokenize(vocab.token(id), vocab.kind()) ==
                 std::vector<std::string>{vocab.token(id)});
  }
  train::Vocab again = train::Vocab::from_json(vocab.to_json(), "written.json");
  FUZZ_CHECK(again.size() == vocab.size() && again.kind() == vocab.kind());
  std::vector<int64_t> ids = vocab.encode(std::string(text));
  for (int64_t id : ids) FUZZ_CHECK(id >= 0 && id < int64_t(vocab.size()));
  vocab.decode(ids);
  return 0;
}
