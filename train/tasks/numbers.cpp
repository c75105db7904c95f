// numbers: digits -> English words.
#include "train/tasks/numbers.h"

#include <array>

#include "engine/error.h"
#include "train/tasks/task.h"

namespace qkv::train {

namespace {

const std::array<std::string, 20> kOnes = {
    "zero",     "one",     "two",     "three",     "four",     "five",    "six",
    "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",  "thirteen",
    "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
const std::array<std::string, 10> kTens = {"",      "",      "twenty",  "thirty", "forty",
                                           "fifty", "sixty", "seventy", "eighty", "ninety"};

// 1..999; appends words to `out` separated by spaces.
void below_thousand(int n, std::string& out) {
  auto add = [&out](const std::string& w) { out += (out.empty() ? "" : " ") + w; };
  if (n >= 100) {
    add(kOnes[size_t(n / 100)]);
    add("hundred");
    n %= 100;
  }
  if (n >= 20) {
    add(kTens[size_t(n / 10)]);
    n %= 10;
  }
  if (n > 0) add(kOnes[size_t(n)]);
}

}  // namespace

std::string number_to_words(int64_t n) {
  QKV_CHECK(n >= 0 && n <= 999999, "number_to_words", "n must be in 0..999999, got ", n);
  if (n == 0) return "zero";
  std::string out;
  if (n >= 1000) {
    below_thousand(int(n / 1000), out);
    out += " thousand";
  }
  if (n % 1000) below_thousand(int(n % 1000), out);
  return out;
}

Pair make_number_pair(Rng& rng) {
  // Uniform over digit counts first: uniform over 0..999999 would be 90% six-digit numbers and
  // the model would rarely see "seven" alone.
  int digits = int(uniform_int(rng, 1, 6));
  int64_t low = digits == 1 ? 0 : 1;
  for (int i = 1; i < digits; ++i) low *= 10;
  int64_t high = low == 0 ? 9 : low * 10 - 1;
  int64_t n = uniform_int(rng, low, high);
  return {std::to_string(n), number_to_words(n)};
}

}  // namespace qkv::train
