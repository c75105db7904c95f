// The CUDA backend suite: every Backend kernel on the GPU against the CPU backend, flash attention
// against a composed reference. Without a GPU (or without CUDA in the build) every GPU test is
// reported as skipped, never as passed. test_cuda_emulated runs the same files on the CPU
// emulator of tests/cuda_emulator (docs/CUDA.md).
#define BOOST_TEST_MODULE cuda
#include <boost/test/unit_test.hpp>
