// Which CUDA device a tensor-parallel rank drives, and which devices the job's ranks on one host
// drive: a rank takes the GPU of its host-local rank (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK; with
// another launcher, its world rank, all ranks on one host), so the engine (which device to
// open) and serve (whose clocks /metrics reports) agree from the same rule.
#pragma once

#include <vector>

namespace uniprefill::dist {

// The device rank `world_rank` of a tensor-parallel job drives.
int RankCudaDevice(int world_rank);

// The devices the job's ranks on this host drive: 0 .. local ranks - 1 (OMPI_COMM_WORLD_LOCAL_SIZE,
// else `world_size`); {0} for a job of one rank.
std::vector<int> HostCudaDevices(int world_size);

}  // namespace uniprefill::dist
