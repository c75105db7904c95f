// qkv::Error and the checks that raise it.
//
// Every misuse of the library (bad shapes, wrong dtype, index out of range, a freed graph) throws
// qkv::Error with a message that starts with the op's name, so a user reading one line knows where
// and why: "matmul: inner dimensions differ: [2,3,64] @ [2,3,64]". Checks are always on: they guard
// user input, so they must not disappear in a Release build.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace qkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Throws qkv::Error("<op>: <message parts...>") when `condition` is false.
#define QKV_CHECK(condition, op, ...)                                                   \
  do {                                                                                  \
    if (!(condition)) throw ::qkv::Error(::qkv::detail::concat(op, ": ", __VA_ARGS__)); \
  } while (0)

}  // namespace qkv
