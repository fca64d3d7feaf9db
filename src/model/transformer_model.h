// TransformerModel: the engine's one model, a ModelDefinition (config, weights, layer recipe) run
// by one layer walk on a LayerBackend (CPU or CUDA). Every family, every device and the GPU
// benchmark's random-weight models go through the same ForwardBatch.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "model/layer_backend.h"
#include "model/model.h"
#include "model/model_definition.h"

namespace uniprefill {

class PhaseClock;  // transformer_model.cc: the walk's optional per-step timing

class TransformerModel final : public Model {
 public:
  // comm (not owned; null or a world of one: no tensor parallelism): the definition is this
  // rank's shard (dist/shard_definition.h) and the walk sums the row-parallel outputs over it.
  TransformerModel(std::unique_ptr<const ModelDefinition> definition,
                   std::unique_ptr<LayerBackend> backend, dist::Communicator* comm = nullptr)
      : def_(std::move(definition)), backend_(std::move(backend)), comm_(comm) {}

  const ModelConfig& config() const override { return def_->config; }
  size_t resident_weight_bytes() const override {
    return def_->host_copy_bytes + backend_->resident_weight_bytes();
  }
  size_t host_weight_bytes() const override { return def_->HostWeightBytes(); }
  Device device() const override { return backend_->device(); }
  std::unique_ptr<SequenceCache> NewCache(int max_tokens,
                                          const std::vector<int>& drop_layers) const override {
    return backend_->NewCache(CacheLayoutFor(drop_layers), max_tokens);
  }
  bool supports_segment_chunks() const override { return backend_->supports_segment_chunks(); }
  std::vector<SegmentCost> SegmentCosts(const std::vector<int>& drop_layers) const override;
  Status FixCachePool(int num_blocks, int block_tokens) override {
    return backend_->FixCachePool(CacheLayoutFor({}), num_blocks, block_tokens);
  }
  Status PrepareServing(int max_step_rows, int max_context) override {
    return backend_->PrepareServing(max_step_rows, max_context);
  }
  Status ForwardBatch(DeviceContext& ctx, std::span<const SequenceStep> steps,
                      const UniPrefillConfig& uniprefill, const ProgressFn& progress = nullptr,
                      ForwardStats* stats = nullptr) override;

  const ModelDefinition& definition() const { return *def_; }
  // LoadOptions::last_layer_every_row (MakeModel sets it).
  void set_last_layer_every_row(bool on) { last_layer_every_row_ = on; }

 private:
  // Embed, every layer, Finish (after a Begin that found rows).
  Status Walk(std::span<const SequenceStep> steps, const UniPrefillConfig& uniprefill,
              const std::vector<int>& drops, const ProgressFn& progress, ForwardStats* stats,
              PhaseClock& clock);
  std::unique_ptr<const ModelDefinition> def_;  // the backend points into it: declared first
  std::unique_ptr<LayerBackend> backend_;
  dist::Communicator* comm_ = nullptr;
  bool last_layer_every_row_ = false;
};

// LoadOptions::last_layer_every_row, or UNIPREFILL_LAST_LAYER_EVERY_ROW (1 / 0) where set (so
// one binary runs both in a benchmark); InvalidArgument naming any other value.
Result<bool> LastLayerEveryRow(const LoadOptions& options);

// The model of `definition` on ctx's device (the CPU, or a CUDA context's GPU: weights uploaded as
// bf16; LoadOptions::progress counts layers uploaded, gpu_delta_rule picks the DeltaNet kernel).
// With LoadOptions::communicator, the definition is cut to this rank's shard first (a world of
// one: the whole model, through the same path) and the walk all-reduces over it (CPU or GPU).
Result<std::unique_ptr<Model>> MakeModel(ModelDefinition definition, DeviceContext& ctx,
                                         const LoadOptions& options = {});

}  // namespace uniprefill
