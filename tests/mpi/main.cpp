// The MPI suite: started by mpirun with 2 or 3 ranks (ctest's mpi_np2, mpi_np3), each rank runs
// every case, and every case calls the same collectives in the same order on every rank.
// tests/mpi/support.h ends the whole job at the first unexpected exception, so a rank that fails
// cannot leave the others waiting in a collective.
#define BOOST_TEST_MODULE mpi
#include <boost/test/unit_test.hpp>
