// The CPU backend: a model definition's layers in f32 on the host, through the ops of src/ops and
// the blocks of src/model/blocks (attention with UniPrefill drops, Gated DeltaNet, gated MLP, MoE).
// Weights are read in place from the definition (the mapped file, plus its f32 copies).
#pragma once

#include <memory>

#include "core/status.h"
#include "model/layer_backend.h"
#include "model/model_definition.h"

namespace uniprefill {

// `definition` must outlive the backend. Random (unmaterialised) weights are refused: CPU models
// of random presets are built with materialised weights (model/model_presets.h).
Result<std::unique_ptr<LayerBackend>> MakeCpuBackend(const ModelDefinition& definition);

}  // namespace uniprefill
