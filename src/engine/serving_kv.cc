// SizeServingKv (serving_kv.h).
#include "engine/serving_kv.h"

namespace uniprefill {

Result<ServingKv> SizeServingKv(const Model& model, const UniPrefillConfig& uniprefill,
                                const ServingOptions& options) {
  ServingKv kv;
  kv.layout = model.CacheLayoutFor(uniprefill.active_drop_layers());
  const bool on_device = model.device() == Device::kCuda;
  UP_ASSIGN_OR_RETURN(kv.spec, KvCacheSpec::FromLayout(kv.layout, on_device ? 2 : sizeof(float)));
  const KvCacheConfig config{options.kv_cache_memory, options.kv_block_tokens,
                             options.max_num_seqs};
  UP_ASSIGN_OR_RETURN(kv.size, KvBlockManager::SizePool(kv.spec, config));
  return kv;
}

}  // namespace uniprefill
