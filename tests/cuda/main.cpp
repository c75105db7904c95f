// The CUDA backend suite: every Backend kernel on the GPU against the CPU backend, flash attention
// against a composed reference. Without a GPU (or without CUDA in the build) every GPU test is
// reported as skipped, never as passed.
#define BOOST_TEST_MODULE cuda
#include <boost/test/unit_test.hpp>
