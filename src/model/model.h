// Model: a loaded architecture that turns token ids into next-token logits, one sequence at a time
// (batched forwards over several requests arrive with the UniPrefill issue).
//
// Invariants: Forward appends exactly tokens.size() entries to the cache; logits are f32 [vocab]
// for the last token. A model holds its weights (mmap'd file plus any dequantised copies) and no
// per-sequence state: that lives in the KvCache, so one model serves many sequences.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/device_context.h"
#include "core/status.h"
#include "io/gguf.h"
#include "kv/kv_cache.h"
#include "model/model_config.h"

namespace uniprefill {

// Called with (done, total) units of work, for progress bars.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // A cache sized for this model; max_chunk bounds tokens per Forward call.
  virtual KvCache NewCache(int max_tokens) const = 0;
  // The largest number of tokens one Forward call processes at once (longer inputs are split).
  virtual int max_chunk() const = 0;
  // Runs tokens through the model at positions cache.length().., appending them to the cache, and
  // writes the last token's logits f32 [vocab] into `logits`.
  virtual Status Forward(DeviceContext& ctx, std::span<const int32_t> tokens, KvCache& cache,
                         float* logits, const ProgressFn& progress = nullptr) = 0;
  // Bytes of weights held in memory beyond the mapped file (dequantised copies).
  virtual size_t resident_weight_bytes() const = 0;
};

struct LoadOptions {
  // Dequantise linear weights to f32 for fast many-token GEMMs (prefill). Costs ~4 bytes per
  // weight of memory; off means every matmul runs fused on the quantised weights.
  bool f32_prefill_weights = true;
  // Decode (one-row) matmuls quantise the activation row to int16 for integer kernels (~2x faster
  // on AVX2, error ~1e-5 of the row's max). true: f32 activations throughout (exact, slower).
  bool f32_decode = false;
  ProgressFn progress;
};

// Opens a GGUF model file and builds the model for its architecture. Errors name the file and what
// is wrong (missing, not GGUF, truncated, unsupported architecture or quantisation, bad shapes).
Result<std::unique_ptr<Model>> LoadModel(const std::string& path, DeviceContext& ctx,
                                         const LoadOptions& options);
// The same from an already opened file (the engine also builds its tokenizer from it).
Result<std::unique_ptr<Model>> LoadModel(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                         const LoadOptions& options);

}  // namespace uniprefill
