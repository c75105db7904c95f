#include "train/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/error.h"
#include "train/atomic_file.h"
#include "train/run_lock.h"

namespace qkv::train {

namespace fs = std::filesystem;

namespace {

bool entry_exists(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found;
}

// The folder name `checkpoint` links to, or "" when there is no link.
std::string current_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(dir / kCheckpointLink, ec))) return "";
  return fs::read_symlink(dir / kCheckpointLink, ec).string();
}

bool is_link_to(const fs::path& p, const std::string& target) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(p, ec)) && fs::read_symlink(p, ec).string() == target;
}

// So that a rename or a new entry in `dir` survives a crash of the machine too.
void sync_folder(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Makes dir/name a symbolic link to `target`, replacing whatever had that name in one rename.
void link_atomically(const fs::path& dir, const std::string& name, const std::string& target) {
  const fs::path tmp = dir / (name + ".tmp." + std::to_string(::getpid()));
  ::unlink(tmp.c_str());
  if (::symlink(target.c_str(), tmp.c_str()) != 0)
    throw Error("checkpoint: cannot create the link " + tmp.string() + ": " + std::strerror(errno));
  if (::rename(tmp.c_str(), (dir / name).c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error("checkpoint: cannot rename a link onto " + (dir / name).string() + ": " +
                std::strerror(err));
  }
}

// Removes a checkpoint folder being written unless it was switched to.
struct PartialCheckpoint {
  fs::path path;
  bool switched = false;
  ~PartialCheckpoint() {
    std::error_code ec;
    if (!switched) fs::remove_all(path, ec);
  }
};

void make_folder(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);  // a folder of the same name can only be a stale one (see the caller)
  if (!fs::create_directory(p, ec))
    throw Error("checkpoint: cannot create " + p.string() + ": " + ec.message());
}

// A run folder of the layout before checkpoint folders: its checkpoint is plain files at the top
// level. They are hard-linked (or copied) into a checkpoint folder that the link then names, and
// each plain name is replaced by its link; at every moment each name holds the same checkpoint.
void adopt_plain_checkpoint(const fs::path& dir, const std::vector<std::string>& names) {
  const std::string adopted = std::string(kCheckpointLink) + ".adopted";
  make_folder(dir / adopted);
  PartialCheckpoint partial{dir / adopted};
  for (const auto& name : names) {
    std::error_code ec;
    if (!fs::is_regular_file(fs::symlink_status(dir / name, ec))) continue;
    const fs::path to = dir / adopted / name;
    if (::link((dir / name).c_str(), to.c_str()) != 0)
      write_file_atomic(to.string(), read_file((dir / name).string(), "checkpoint"));
  }
  sync_folder(dir / adopted);
  link_atomically(dir, kCheckpointLink, adopted);
  partial.switched = true;
  for (const auto& name : names) {
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(dir / name, ec)))
      link_atomically(dir, name, std::string(kCheckpointLink) + "/" + name);
  }
  sync_folder(dir);
}

}  // namespace

std::string checkpoint_folder_name(int64_t step) {
  char name[48];
  std::snprintf(name, sizeof name, "%s.%09lld", kCheckpointLink, (long long)step);
  return name;
}

void write_checkpoint(const std::string& folder, int64_t step, const CheckpointFiles& files) {
  const fs::path dir(folder);
  std::vector<std::string> names;
  for (const auto& [name, bytes] : files) names.push_back(name);
  // A copy that followed the links (scp -r, cp -L, rsync without -l) made `checkpoint` a plain
  // folder and the names plain files holding the same checkpoint: adopted like an older layout.
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(dir / kCheckpointLink, ec)))
    fs::remove_all(dir / kCheckpointLink, ec);
  if (!entry_exists(dir / kCheckpointLink)) {
    bool plain = false;
    for (const auto& name : names)
      plain = plain || fs::is_regular_file(fs::symlink_status(dir / name, ec));
    if (plain) adopt_plain_checkpoint(dir, names);
  }
  const std::string previous = current_checkpoint(dir);
  const std::string next = checkpoint_folder_name(step);
  // Steps only grow within a run and a resumed run starts after its checkpoint's step.
  if (next == previous)
    throw Error("checkpoint: step " + std::to_string(step) + " is already the checkpoint of " +
                folder);

  make_folder(dir / next);
  PartialCheckpoint partial{dir / next};
  for (const auto& [name, bytes] : files) write_file_atomic((dir / next / name).string(), bytes);
  // A fresh folder's names link through `checkpoint` before it exists: they appear, all at
  // once, with the first switch.
  for (const auto& name : names)
    if (!entry_exists(dir / name))
      link_atomically(dir, name, std::string(kCheckpointLink) + "/" + name);
  sync_folder(dir);

  const CheckpointLock readers_wait(folder, CheckpointLock::write);
  link_atomically(dir, kCheckpointLink, next);
  partial.switched = true;
  sync_folder(dir);
  // A name replaced by a plain file (by hand) is a link again from now on.
  for (const auto& name : names)
    if (!is_link_to(dir / name, std::string(kCheckpointLink) + "/" + name))
      link_atomically(dir, name, std::string(kCheckpointLink) + "/" + name);
  if (!previous.empty()) fs::remove_all(dir / previous, ec);
}

std::vector<std::string> remove_stale_checkpoints(const std::string& folder) {
  const fs::path dir(folder);
  const std::string current = current_checkpoint(dir);
  const std::string prefix = std::string(kCheckpointLink) + ".";
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name == current ||
        !fs::is_directory(fs::symlink_status(entry.path(), ec)))
      continue;
    fs::remove_all(entry.path(), ec);
    removed.push_back(name);
  }
  return removed;
}

std::string temporary_of(const std::string& name) {
  const std::string tmp = ".tmp";
  if (name.size() > tmp.size() && name.compare(name.size() - tmp.size(), tmp.size(), tmp) == 0)
    return name.substr(0, name.size() - tmp.size());
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0 || at + 5 == name.size() ||
      name.find_first_not_of("0123456789", at + 5) != std::string::npos)
    return "";
  return name.substr(0, at);
}

}  // namespace qkv::train
