#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/error.h"

namespace qkv::train {

namespace {

// The pid the holder wrote into the lock file, or "" when it cannot be read (yet).
std::string holder_pid(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string pid(text, n > 0 ? size_t(n) : 0);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid;
}

int flock_retrying(int fd, int operation) {
  int rc;
  do rc = ::flock(fd, operation);
  while (rc != 0 && errno == EINTR);
  return rc;
}

}  // namespace

RunFolderLock::RunFolderLock(const std::string& folder, const std::string& option) {
  const std::string path = (std::filesystem::path(folder) / kLockFile).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(option + ": cannot lock " + folder + " (" + path + "): " + std::strerror(errno));
  if (flock_retrying(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = holder_pid(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK)
      throw Error(option + ": cannot lock " + folder + " (" + path + "): " + std::strerror(err));
    throw Error(option + ": " + folder + " is in use by another qkv process" +
                (pid.empty() ? "" : " (pid " + pid + ")") +
                ": one run folder takes one writer at a time; wait for it to end or choose "
                "another folder");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  // The pid only makes a refusal clearer: failing to record it is not an error.
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t written = ::pwrite(fd_, pid.data(), pid.size(), 0);
    (void)written;
  }
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
}

CheckpointLock::CheckpointLock(const std::string& folder, Kind kind) {
  fd_ = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) return;
  if (flock_retrying(fd_, kind == read ? LOCK_SH : LOCK_EX) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace qkv::train
