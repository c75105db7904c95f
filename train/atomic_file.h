// Writing files so that a reader never sees half of one.
//
// A run folder is read while the run is going (by people, by plots, by a resumed run), and a run
// can be killed at any moment. So every file qkv writes whole (configs, vocabularies, pictures,
// checkpoints) goes to a temporary file in the same folder first, is fsync'ed, and is then renamed
// over the target: rename within a folder is atomic on POSIX, so the target is either the old file
// or the new one, never a torn mix.
#pragma once

#include <string>
#include <string_view>

namespace qkv::train {

// Replaces `path` with `bytes` atomically. Throws qkv::Error naming the path when the temporary
// file cannot be created, written, synced or renamed; the old file (if any) is then untouched.
void write_file_atomic(const std::string& path, std::string_view bytes);

// The whole file as bytes; throws qkv::Error("<what>: cannot read <path>: <reason>").
std::string read_file(const std::string& path, const std::string& what = "read_file");

}  // namespace qkv::train
