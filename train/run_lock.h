// Locks on a run folder, so that two processes never write one folder and a reader never loads a
// checkpoint while it is being switched.
//
// Both are flock(2) locks: the kernel releases them when the process ends, however it ends (a
// `kill -9` leaves no stale lock behind), and they bind file descriptors, so two locks taken in
// one process exclude each other just as two processes do.
#pragma once

#include <string>

namespace qkv::train {

// The lock file of a run folder. Its content (the holder's pid) is only for the refusal message.
inline const char* kLockFile = "qkv.lock";

// Held by every command that writes a run folder (training, a resume, `qkv quantize`) for as long
// as it runs: an exclusive lock on `folder/qkv.lock`, created if needed. Never waits: a folder
// another process holds is refused at once with qkv::Error("<option>: <folder> is in use by
// another qkv process (pid N) ...").
class RunFolderLock {
 public:
  RunFolderLock(const std::string& folder, const std::string& option);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  int fd_ = -1;
};

// A short lock on the folder itself (flock of its directory): a writer holds it exclusively while
// it switches the checkpoint and removes the previous one; a reader holds it shared while it
// loads, so the files it opens are never removed under it. Waits for the other side (both hold
// it for milliseconds). A folder that cannot be opened or locked (missing, or a file system
// without flock) is not locked: the checkpoint's single-rename switch still keeps it whole.
class CheckpointLock {
 public:
  enum Kind { read, write };
  CheckpointLock(const std::string& folder, Kind kind);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace qkv::train
