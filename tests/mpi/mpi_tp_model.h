// `--tp-model DIR` of the MPI test binary (tests/mpi/mpi_collectives_test.cc): a tiny checkpoint
// run sharded over the mpirun world against the same run in one process (each rank runs both).
#pragma once

#include <string>

#include "dist/communicator.h"

namespace uniprefill::testing {

// Prints "tp-model OK" and returns 0 when this rank's sharded run keeps TP 1's tokens at every
// drop, chooses its 32 greedy tokens and has its logits within 1e-4 of their scale; else prints
// "FAIL ..." lines and returns 1.
int RunTpModel(dist::Communicator& comm, const std::string& dir);

}  // namespace uniprefill::testing
