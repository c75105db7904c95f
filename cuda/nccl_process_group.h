// A ProcessGroup for CUDA tensors on NCCL (built when both CUDA and MPI are: -DWITH_MPI).
//
// One rank per GPU: the CUDA backend drives device 0, so each rank is started with its own GPU
// visible (CUDA_VISIBLE_DEVICES, docs/DISTRIBUTED.md). NCCL needs one id shared by all ranks
// before they can talk; rank 0 creates it and the bootstrap group (MPI's world) broadcasts it.
// The collectives are queued on the backend's stream, after the kernels that produced their
// tensors and before the ones that read them; the CPU does not wait for them. The ordered sum is
// the one of engine/process_group.h: the chunks are exchanged with NCCL's send/receive, summed in
// rank order by qkv's own add kernel, and allgathered. Nothing here names a CUDA or NCCL type.
#pragma once

#include <memory>

#include "engine/process_group.h"

namespace qkv::cuda {

// Collective over `bootstrap`'s ranks. Throws when there is no GPU, naming why.
std::shared_ptr<ProcessGroup> nccl_process_group(std::shared_ptr<ProcessGroup> bootstrap);

}  // namespace qkv::cuda
