// The NCCL transport for the CUDA backend (dist/communicator.h): one rank per process and GPU.
// Host collectives (the scheduler's plans, the drop layers' host-side data, barriers) go through
// the `host` communicator it wraps (MPI under mpirun, or the local world of one); device
// collectives (the row-parallel all-reduces, the block scores) through an NCCL communicator whose
// unique id rank 0 makes and broadcasts over `host`. libnccl.so.2 is loaded at run time (a
// machine without NCCL gets Unimplemented here and can still run a world of one). NVLink
// multicast (NVLS) is left off (NCCL_NVLS_ENABLE=0 unless the environment says otherwise).
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace uniprefill::dist {

// `device`: this rank's GPU (the CUDA device index its DeviceContext uses). The NCCL setup waits
// at most options.timeout_s for the other ranks (then Unavailable).
Result<std::unique_ptr<Communicator>> MakeNcclCommunicator(std::unique_ptr<Communicator> host,
                                                           int device,
                                                           const CommOptions& options = {});

}  // namespace uniprefill::dist
