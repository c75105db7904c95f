// A run's checkpoint as one unit: its files live in a folder of their own, and one symbolic link
// names the current one, so that switching from one checkpoint to the next is a single rename.
//
//   runs/NAME/checkpoint -> checkpoint.000000120     the current checkpoint (switched last)
//   runs/NAME/checkpoint.000000120/model.safetensors, optimizer.safetensors, trainer_state.json
//   runs/NAME/model.safetensors -> checkpoint/model.safetensors   (and the same for the others)
//
// Writing the checkpoint of step N: its files go into checkpoint.<N> and are synced; then the link
// `checkpoint` is replaced by one naming checkpoint.<N> (rename(2) over it: atomic), and only then
// is the previous checkpoint's folder removed. A process killed at any moment leaves `checkpoint`
// naming either the old checkpoint or the new one, each whole: never new weights beside an old
// optimizer state or step. The top-level names are links through `checkpoint`, so whoever opens
// runs/NAME/model.safetensors (qkv eval, PyTorch) reads the current checkpoint's file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace qkv::train {

inline const char* kCheckpointLink = "checkpoint";
// The current checkpoint's weights, at the top of the run folder (a link, as above).
inline const char* kModelFile = "model.safetensors";

// The files of one checkpoint: (name, bytes), in the order they are written.
using CheckpointFiles = std::vector<std::pair<std::string, std::string>>;

// "checkpoint.000000120": the folder of step 120's checkpoint.
std::string checkpoint_folder_name(int64_t step);

// Writes `files` as the run folder's checkpoint of `step` and switches to it, as above. The
// caller holds the folder's RunFolderLock. Throws qkv::Error naming the file or link when a step
// fails (a full disk); the previous checkpoint is then still the current one, and the new one's
// partial folder is removed.
void write_checkpoint(const std::string& folder, int64_t step, const CheckpointFiles& files);

// Checkpoint folders that the `checkpoint` link does not name: what a writer killed while writing
// one left. The caller holds the folder's RunFolderLock, so no live writer can own them. Removes
// them and returns their names.
std::vector<std::string> remove_stale_checkpoints(const std::string& folder);

// The file a temporary stands in for: "model.json" for "model.json.tmp.4242" (write_file_atomic,
// and the links here) or for "model.json.tmp" (nn::save_safetensors); "" for any other name.
std::string temporary_of(const std::string& name);

}  // namespace qkv::train
