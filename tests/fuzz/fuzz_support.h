// What every fuzz target shares: the loader under test may answer an input with qkv::Error (the
// clear error a bad file deserves) or with a result; anything else is a bug. Other exceptions
// escape on purpose (libFuzzer and the replay driver report them as a crash), and FUZZ_CHECK
// states properties a successful result must have.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/error.h"

#define FUZZ_CHECK(condition)                                                                 \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

namespace qkv::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `use()`; a qkv::Error whose message names `file` (so a user knows which file is bad) is a
// correct answer to a bad input. Returns whether `use()` succeeded.
template <typename F>
bool accepts(std::string_view file, F&& use) {
  try {
    use();
    return true;
  } catch (const qkv::Error& e) {
    if (std::string_view(e.what()).find(file) == std::string_view::npos) {
      std::fprintf(stderr, "error does not name %.*s: %s\n", int(file.size()), file.data(),
                   e.what());
      std::abort();
    }
    return false;
  }
}

}  // namespace qkv::fuzz
