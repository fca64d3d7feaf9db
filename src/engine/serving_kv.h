// The paged KV cache a serving engine sizes from ServingOptions: rank 0's BatchEngine and the
// tensor-parallel followers (BatchEngine::Follow) size theirs through this one function, so every
// rank's pool holds the same number of blocks and a follower never runs out where rank 0 did not.
#pragma once

#include "core/status.h"
#include "kv/kv_block_manager.h"
#include "kv/sequence_cache.h"
#include "model/model.h"
#include "sparsity/uniprefill_config.h"
#include "uniprefill/batch_engine.h"

namespace uniprefill {

struct ServingKv {
  CacheLayout layout;
  KvCacheSpec spec;
  KvPoolSize size;
};

// Host models keep f32 K/V (a KvArena); a device model keeps bf16 K/V in its own pool.
Result<ServingKv> SizeServingKv(const Model& model, const UniPrefillConfig& uniprefill,
                                const ServingOptions& options);

// A device model's serving setup, the same on rank 0 and on every tensor-parallel follower: its
// pool fixed to exactly kv's blocks (Model::FixCachePool) and, with chunked prefill, its kernels
// prepared for the step budgets and the context (Model::PrepareServing). Returns the seconds the
// preparation took. Host models need none of it (0).
Result<double> PrepareDeviceServing(Model& model, const ServingKv& kv,
                                    const ServingOptions& options, int context_size);

}  // namespace uniprefill
