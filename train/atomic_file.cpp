#include "train/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
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

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = temp_path_for(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create a temporary file for", path, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("write", path, err);
    }
    done += size_t(n);
  }
  // Without fsync a crash after the rename can leave the new name pointing at empty blocks.
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("sync", path, err);
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("close", path, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("rename a temporary file onto", path, err);
  }
  // The rename itself lives in the folder's entry list; sync that too so it survives a crash.
  // A failure here loses nothing already written, so it is not an error.
  std::string folder =
      path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + ": cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace qkv::train
