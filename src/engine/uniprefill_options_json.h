// The UniPrefill options' one schema: a table of fields (JSON key, command-line flag, help, type,
// range) from which the `--uniprefill-config` files (`uniprefill calibrate` writes them), the
// per-request HTTP extension, the command-line flags (apps/uniprefill_flags.cc) and their error
// messages are all made:
//   {"enabled": true, "drop_layers": [5, 11], "mode": "top-p", "top_p": 0.975,
//    "keep_ratio": 0.5, "block_size": 64, "sink": 128, "last_n": 128, "window": "alive"}
// Every key is optional (absent = the model's default). Unknown keys, wrongly typed values and
// values out of range (checked by the same rules the engine applies, so a bad request is refused
// before any work) are errors that name the key, so a typo never silently falls back to a default.
// A keep ratio given without a mode means fixed-ratio, whichever way it came.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "uniprefill/engine.h"

namespace uniprefill {

// One UniPrefill option.
struct UniPrefillField {
  std::string_view key;   // JSON key (config files, the HTTP extension)
  std::string_view flag;  // command-line flag
  std::string_view value;  // the flag's value in --help ("on|off", "P", ...)
  std::string_view help;   // for --help
  // Sets the field of `o` from a JSON value; type and range checked, errors name the key.
  Status (*read)(const nlohmann::json& value, UniPrefillOptions& o);
  // The field as JSON (null when unset).
  nlohmann::json (*write)(const UniPrefillOptions& o);
  // A flag's text as the JSON value `read` takes ("on" -> true, "5,11" -> [5, 11], "0.5" -> 0.5);
  // errors say what the text should be.
  Result<nlohmann::json> (*parse_text)(std::string_view text);
};

// Every field, in the order documentation lists them.
std::span<const UniPrefillField> UniPrefillFields();

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
