// N ranks as threads of one process (dist/communicator.h): each thread gets its own communicator
// of the shared world; collectives meet at a rendezvous and the last rank to arrive does the work
// for all (sums in rank order, so every rank gets bit-identical results). For tests of sharded
// models (TP = N vs TP = 1 in one process) and for a single-process multi-GPU driver later.
#pragma once

#include <memory>
#include <vector>

#include "dist/communicator.h"

namespace uniprefill::dist {

// world communicators; [r] is rank r's (use each from one thread).
std::vector<std::unique_ptr<Communicator>> MakeThreadCommunicators(int world,
                                                                   const CommOptions& options);

}  // namespace uniprefill::dist
