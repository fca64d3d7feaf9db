// Device collectives staged through the host (dist/communicator.h): the device data is copied to
// the host, summed by a host communicator in f32 (bf16 widened, rounded once at the end), and
// copied back. For N ranks as threads sharing one GPU (NCCL refuses two ranks on one device):
// the tests run a model's N shards on the lent H200 against the unsharded model this way. Slow
// (every collective synchronises its stream); serving uses NCCL (nccl_communicator.h).
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace uniprefill::dist {

// Wraps `host` (owned): its host collectives pass through, AllReduceDevice is staged.
std::unique_ptr<Communicator> MakeStagedDeviceCommunicator(std::unique_ptr<Communicator> host);

}  // namespace uniprefill::dist
