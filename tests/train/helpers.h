// Test helpers: a scratch folder per test and error-message matching.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "engine/error.h"

namespace qkv::train::test {

// A fresh empty folder under /tmp, removed when the test ends.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() /
           ("qkv_train_test_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// While it lives, every file written through train/atomic_file.h fails with ENOSPC once `bytes` of
// it are written, as on a full disk.
struct SimulatedFullDisk {
  explicit SimulatedFullDisk(size_t bytes) {
    ::setenv("QKV_FAIL_WRITE_AFTER_BYTES", std::to_string(bytes).c_str(), 1);
  }
  ~SimulatedFullDisk() { ::unsetenv("QKV_FAIL_WRITE_AFTER_BYTES"); }
};

// A predicate for BOOST_CHECK_EXCEPTION: the message contains every one of `parts`.
template <typename... Parts>
auto message_has(Parts... parts) {
  return [=](const qkv::Error& e) {
    std::string m = e.what();
    bool ok = ((m.find(parts) != std::string::npos) && ...);
    if (!ok) BOOST_TEST_MESSAGE("message was: " << m);
    return ok;
  };
}

}  // namespace qkv::train::test
