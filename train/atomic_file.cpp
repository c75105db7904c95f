#include "train/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "engine/error.h"

namespace qkv::train {

namespace {

std::string temp_path_for(const std::string& path) {
  // The pid keeps two processes writing the same file from sharing a temporary.
  return path + ".tmp." + std::to_string(::getpid());
}

[[noreturn]] void fail(const std::string& step, const std::string& path, int err) {
  throw Error("write_file_atomic: cannot " + step + " " + path + ": " + std::strerror(err));
}

// QKV_FAIL_WRITE_AFTER_BYTES (see atomic_file.h): how many bytes of a file may be written before
// the simulated disk is full. Read on every file so a test can set and unset it.
size_t simulated_disk_space() {
  const char* limit = std::getenv("QKV_FAIL_WRITE_AFTER_BYTES");
  if (!limit || !*limit) return std::numeric_limits<size_t>::max();
  return size_t(std::strtoull(limit, nullptr, 10));
}

ssize_t write_some(int fd, const char* data, size_t n, size_t done, size_t space) {
  if (done >= space) {
    errno = ENOSPC;
    return -1;
  }
  return ::write(fd, data, std::min(n, space - done));
}

}  // namespace

StagedFile::StagedFile(std::string path, std::string_view bytes)
    : path_(std::move(path)), tmp_(temp_path_for(path_)) {
  int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create a temporary file for", path_, errno);
  const size_t space = simulated_disk_space();
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write_some(fd, bytes.data() + done, bytes.size() - done, done, space);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp_.c_str());
      fail("write", path_, err);
    }
    done += size_t(n);
  }
  // Without fsync a crash after the rename can leave the new name pointing at empty blocks.
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    fail("sync", path_, err);
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp_.c_str());
    fail("close", path_, err);
  }
}

StagedFile::~StagedFile() {
  if (!committed_) ::unlink(tmp_.c_str());
}

void StagedFile::commit() {
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail("rename a temporary file onto", path_, errno);
  committed_ = true;
  // The rename itself lives in the folder's entry list; sync that too so it survives a crash.
  // A failure here loses nothing already written, so it is not an error.
  std::string folder =
      path_.find('/') == std::string::npos ? "." : path_.substr(0, path_.rfind('/') + 1);
  int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  StagedFile(path, bytes).commit();
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + ": cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace qkv::train
