// UniPrefillConfig: where and how UniPrefill drops tokens for one model, as typed configuration.
//
// Defaults (DefaultUniPrefillConfig): the reference implementation's per-model settings where the
// model is one of them (recognised by architecture, depth and width, so a quantised or renamed copy
// still matches), otherwise the documented rule of docs/uniprefill.md:
//   drop layers = the full-attention layers i with L/4 - 1 <= i < 0.85 L, each at least L/8 layers
//   after the previous one chosen; p = 0.975 for sliding-window hybrids (as the Gemma reference),
//   0.99 otherwise; G = 64, S = 128, n = 128, mode top-p.
// Flags override single fields (apps/uniprefill_flags.cc).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_config.h"
#include "sparsity/token_selection.h"

namespace uniprefill {

// How a device backend learns what a drop layer kept (the CPU always knows at once).
enum class DropSync {
  // Fixed ratio runs without a host sync (later layers on a bound, counts on the device); top-p
  // syncs once per drop layer, since its kept count has no useful bound.
  kOnlyWhenNeeded,
  // One host sync per drop layer in every mode: exactly laid-out segments (the sync-free path's
  // reference in tests and diagnostics).
  kEveryDrop,
};

struct UniPrefillConfig {
  bool enabled = true;
  std::vector<int> drop_layers;        // ascending full-attention layer indices
  sparsity::SelectionParams selection;
  WindowMode window_mode = WindowMode::kAliveIndex;
  DropSync drop_sync = DropSync::kOnlyWhenNeeded;  // execution only: kept tokens are the same
  std::string origin;                  // why these settings: "reference default for ...", "rule"

  // The drop layers in effect (none when disabled).
  std::vector<int> active_drop_layers() const {
    return enabled ? drop_layers : std::vector<int>();
  }
};

UniPrefillConfig DefaultUniPrefillConfig(const ModelConfig& model);

// Drop layers ascending, unique, inside the model, full-attention layers; selection params valid.
Status ValidateUniPrefillConfig(const UniPrefillConfig& config, const ModelConfig& model);

// "7,11,15" -> {7, 11, 15}; empty string -> {}. Errors name the bad element.
Result<std::vector<int>> ParseLayerList(const std::string& text);
std::string LayerListToString(const std::vector<int>& layers);

}  // namespace uniprefill
