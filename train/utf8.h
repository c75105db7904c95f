// UTF-8 text: validity and splitting into characters (code points).
//
// Text reaches qkv from data files and the command line as bytes. Everything a run writes -
// config.json, the vocabulary files, metrics - is JSON, which must be valid UTF-8, and the
// character tokenizer must keep a multi-byte character (é, 日) as one token, not split it into
// bytes that are not text on their own. These two functions are what both need.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qkv::train {

// True when `text` is well-formed UTF-8: no stray continuation bytes, truncated sequences,
// overlong encodings, surrogates, or code points above U+10FFFF.
bool is_valid_utf8(std::string_view text);

// The characters of `text`, each as its UTF-8 bytes. A byte that does not start a well-formed
// sequence becomes a one-byte piece of its own, so nothing is lost or merged.
std::vector<std::string> split_utf8(std::string_view text);

// `text` followed by spaces up to `width` characters (code points, as split_utf8 counts them;
// printf's "%-32s" counts bytes, so a line with "é" or "日" would end up misaligned).
std::string pad_right(std::string_view text, size_t width);

}  // namespace qkv::train
