// StubLayerBackend: a LayerBackend that computes nothing, for tests of what the model does around
// its backend (the walk's order, the prices it reads). Every step succeeds; Begin reports rows
// when `rows` is true. Tests override what they observe.
#pragma once

#include <memory>
#include <span>

#include "model/layer_backend.h"

namespace uniprefill::testing {

class StubLayerBackend : public LayerBackend {
 public:
  explicit StubLayerBackend(bool rows = false) : rows_(rows) {}
  Device device() const override { return Device::kCpu; }
  size_t resident_weight_bytes() const override { return 0; }
  std::unique_ptr<SequenceCache> NewCache(const CacheLayout&, int) const override {
    return nullptr;
  }
  Status FixCachePool(const CacheLayout&, int, int) override { return OkStatus(); }
  Result<bool> Begin(DeviceContext&, std::span<const SequenceStep>, const UniPrefillConfig&, int,
                     ForwardStats*) override {
    return rows_;
  }
  Status Embed() override { return OkStatus(); }
  Status NormInput(int, NormSlot) override { return OkStatus(); }
  Status NormOutput(int, NormSlot) override { return OkStatus(); }
  Status Attention(int, const DropLayer*, QueryRows) override { return OkStatus(); }
  Status DeltaNet(int) override { return OkStatus(); }
  Status GatedFfn(int) override { return OkStatus(); }
  Status Moe(int) override { return OkStatus(); }
  Status Finish() override { return OkStatus(); }

 private:
  bool rows_;
};

}  // namespace uniprefill::testing
