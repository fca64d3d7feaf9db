// MakeMpiCommunicator for builds without MPI (CMake found no MPI): a clear error.
#include "dist/communicator.h"

namespace uniprefill::dist {

Result<std::unique_ptr<Communicator>> MakeMpiCommunicator(const CommOptions&) {
  return Unimplemented(
      "this build has no MPI (install openmpi-bin and libopenmpi-dev: scripts/setup.sh, then "
      "configure again)");
}

bool HaveMpi() { return false; }

}  // namespace uniprefill::dist
