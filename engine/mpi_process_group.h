// The ProcessGroup of MPI's world (compiled only when qkv is built with MPI: -DWITH_MPI).
//
// MPI is initialised by the first call and finalised when the process exits. The group works on
// its own duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so a failed call (a peer that died,
// a broken connection) comes back as an error code that is turned into a qkv::Error naming the
// collective, the MPI call and the rank, instead of MPI's default of aborting without a word of
// context. MPI calls are made from one thread at a time (MPI_THREAD_FUNNELED is requested: the
// caller's thread, never the thread pool's workers).
#pragma once

#include <memory>

#include "engine/process_group.h"

namespace qkv {

// Initialises MPI on the first call; every later call returns the same group.
std::shared_ptr<ProcessGroup> mpi_world_group();

}  // namespace qkv
