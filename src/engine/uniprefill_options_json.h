// UniPrefillOptions <-> JSON: the file `uniprefill calibrate` writes and `--uniprefill-config`
// reads, and (later) the per-request extension field of the HTTP API. One schema for all three:
//   {"enabled": true, "drop_layers": [5, 11], "mode": "top-p", "top_p": 0.975,
//    "keep_ratio": 0.5, "block_size": 64, "sink": 128, "last_n": 128, "window": "alive"}
// Every key is optional (absent = the model's default). Unknown keys, wrongly typed values and
// values out of range (checked here by the same rules the engine applies, so a bad request is
// refused before any work) are errors that name the key, so a typo never silently falls back to
// a default. A keep ratio given without a mode means fixed-ratio (as on the command line).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "uniprefill/engine.h"

namespace uniprefill {

// The schema's keys, comma-separated, for error messages ("enabled, drop_layers, ...").
std::string UniPrefillOptionKeys();

// A keep ratio given without a mode selects the fixed-ratio mode (it means nothing in top-p
// mode). Every source of options (flags, config files, the HTTP extension) applies it.
void ApplyKeepRatioImpliesFixedRatio(UniPrefillOptions& options);

Result<UniPrefillOptions> UniPrefillOptionsFromJson(const nlohmann::json& j);
nlohmann::json UniPrefillOptionsToJson(const UniPrefillOptions& options);
// Reads a JSON file in the schema above; its options carry source "config <path>".
Result<UniPrefillOptions> LoadUniPrefillOptionsFile(const std::string& path);

}  // namespace uniprefill
