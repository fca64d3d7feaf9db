// UniPrefillOptions <-> JSON: the file `uniprefill calibrate` writes and `--uniprefill-config`
// reads, and (later) the per-request extension field of the HTTP API. One schema for all three:
//   {"enabled": true, "drop_layers": [5, 11], "mode": "top-p", "top_p": 0.975,
//    "keep_ratio": 0.5, "block_size": 64, "sink": 128, "last_n": 128, "window": "alive"}
// Every key is optional (absent = the model's default). Unknown keys and wrongly typed values are
// errors that name the key, so a typo never silently falls back to a default.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "uniprefill/engine.h"

namespace uniprefill {

Result<UniPrefillOptions> UniPrefillOptionsFromJson(const nlohmann::json& j);
nlohmann::json UniPrefillOptionsToJson(const UniPrefillOptions& options);
// Reads a JSON file in the schema above; its options carry source "config <path>".
Result<UniPrefillOptions> LoadUniPrefillOptionsFile(const std::string& path);

}  // namespace uniprefill
