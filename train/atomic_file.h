// Writing files so that a reader never sees half of one.
//
// A run folder is read while the run is going (by people, by plots, by a resumed run), and a run
// can be killed at any moment. So every file qkv writes whole (configs, vocabularies, pictures,
// checkpoints) goes to a temporary file in the same folder first, is fsync'ed, and is then renamed
// over the target: rename within a folder is atomic on POSIX, so the target is either the old file
// or the new one, never a torn mix.
//
// Test-only fault injection: with the environment variable QKV_FAIL_WRITE_AFTER_BYTES=N set, every
// file written here fails with ENOSPC ("No space left on device") once N of its bytes are written,
// as a full disk would, so tests can check that a failed write leaves no temporary file and the
// previous version intact. Files of at most N bytes are written normally.
#pragma once

#include <string>
#include <string_view>

namespace qkv::train {

// Replaces `path` with `bytes` atomically. Throws qkv::Error naming the path when the temporary
// file cannot be created, written, synced or renamed; the old file (if any) is then untouched.
void write_file_atomic(const std::string& path, std::string_view bytes);

// A file written in full to a temporary name beside `path` and synced, but not yet in place:
// commit() renames it over `path`; one never committed is removed by the destructor. A caller
// that writes several files which belong together (a checkpoint) stages them all, then commits
// them: a disk that fills up while they are written leaves every old file as it was.
class StagedFile {
 public:
  // Throws qkv::Error naming `path` (and removes the temporary) when it cannot be written.
  StagedFile(std::string path, std::string_view bytes);
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;
  void commit();

 private:
  std::string path_, tmp_;
  bool committed_ = false;
};

// The whole file as bytes; throws qkv::Error("<what>: cannot read <path>: <reason>").
std::string read_file(const std::string& path, const std::string& what = "read_file");

}  // namespace qkv::train
