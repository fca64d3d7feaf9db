// SizeServingKv and PrepareDeviceServing (serving_kv.h).
#include "engine/serving_kv.h"

#include <chrono>

#include "kv/kv_rows.h"

namespace uniprefill {

Result<ServingKv> SizeServingKv(const Model& model, const UniPrefillConfig& uniprefill,
                                const ServingOptions& options) {
  ServingKv kv;
  kv.layout = model.CacheLayoutFor(uniprefill.active_drop_layers());
  const bool on_device = model.device() == Device::kCuda;
  const int element_bytes = on_device ? 2 : KvElementBytes(kv.layout.kv_dtype);  // device: bf16
  UP_ASSIGN_OR_RETURN(kv.spec, KvCacheSpec::FromLayout(kv.layout, element_bytes));
  const KvCacheConfig config{options.kv_cache_memory, options.kv_block_tokens,
                             options.max_num_seqs};
  UP_ASSIGN_OR_RETURN(kv.size, KvBlockManager::SizePool(kv.spec, config));
  return kv;
}

Result<double> PrepareDeviceServing(Model& model, const ServingKv& kv,
                                    const ServingOptions& options, int context_size) {
  if (model.device() != Device::kCuda) return 0.0;
  UP_RETURN_IF_ERROR(model.FixCachePool(kv.size.num_blocks, kv.size.block_tokens));
  if (!options.chunked_prefill) return 0.0;  // whole prompts keep their power-of-two graphs
  const auto start = std::chrono::steady_clock::now();
  UP_RETURN_IF_ERROR(model.PrepareServing(options.max_batched_tokens, context_size));
  if (options.prefill_only_tokens > options.max_batched_tokens) {  // its steps' own graphs
    UP_RETURN_IF_ERROR(model.PrepareServing(options.prefill_only_tokens, context_size));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace uniprefill
