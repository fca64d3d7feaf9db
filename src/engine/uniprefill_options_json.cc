#include "engine/uniprefill_options_json.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "sparsity/token_selection.h"

namespace uniprefill {
namespace {

// The schema's keys, in the order documentation lists them.
constexpr const char* kKeys[] = {"enabled", "drop_layers", "mode",   "top_p", "keep_ratio",
                                 "block_size", "sink",     "last_n", "window"};

Status TypeError(const std::string& key, const std::string& expected) {
  return InvalidArgument("UniPrefill option '" + key + "' must be " + expected);
}

// The value ranges of the selection fields that are set, by the engine's own rule
// (sparsity::ValidateSelectionParams), checked one field at a time over valid defaults so that
// the error names the field.
Status ValidateSelectionFields(const UniPrefillOptions& o) {
  const auto check = [](const char* key, auto set) -> Status {
    sparsity::SelectionParams p;
    set(p);
    Status s = sparsity::ValidateSelectionParams(p);
    if (s.ok()) return s;
    return InvalidArgument("UniPrefill option '" + std::string(key) + "': " + s.message());
  };
  if (o.top_p) UP_RETURN_IF_ERROR(check("top_p", [&](auto& p) { p.top_p = *o.top_p; }));
  if (o.keep_ratio) {
    UP_RETURN_IF_ERROR(check("keep_ratio", [&](auto& p) { p.keep_ratio = *o.keep_ratio; }));
  }
  if (o.block_size) {
    UP_RETURN_IF_ERROR(check("block_size", [&](auto& p) { p.block_size = *o.block_size; }));
  }
  if (o.sink) UP_RETURN_IF_ERROR(check("sink", [&](auto& p) { p.sink = *o.sink; }));
  if (o.last_n) UP_RETURN_IF_ERROR(check("last_n", [&](auto& p) { p.last_n = *o.last_n; }));
  if (o.mode && *o.mode != "top-p" && *o.mode != "fixed-ratio") {
    return InvalidArgument("UniPrefill option 'mode' must be \"top-p\" or \"fixed-ratio\" (got \"" +
                           *o.mode + "\")");
  }
  if (o.window && *o.window != "alive" && *o.window != "position") {
    return InvalidArgument("UniPrefill option 'window' must be \"alive\" or \"position\" (got \"" +
                           *o.window + "\")");
  }
  return OkStatus();
}

}  // namespace

std::string UniPrefillOptionKeys() {
  std::string keys;
  for (const char* k : kKeys) keys += (keys.empty() ? "" : ", ") + std::string(k);
  return keys;
}

void ApplyKeepRatioImpliesFixedRatio(UniPrefillOptions& o) {
  if (o.keep_ratio && !o.mode) o.mode = "fixed-ratio";
}

Result<UniPrefillOptions> UniPrefillOptionsFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("UniPrefill options must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      return InvalidArgument("unknown UniPrefill option '" + key + "' (known: " +
                             UniPrefillOptionKeys() + ")");
    }
  }
  UniPrefillOptions o;
  if (j.contains("enabled")) {
    if (!j["enabled"].is_boolean()) return TypeError("enabled", "true or false");
    o.enabled = j["enabled"].get<bool>();
  }
  if (j.contains("drop_layers")) {
    const auto& d = j["drop_layers"];
    if (!d.is_array()) return TypeError("drop_layers", "an array of layer indices");
    std::vector<int> layers;
    for (const auto& v : d) {
      if (!v.is_number_integer()) return TypeError("drop_layers", "an array of layer indices");
      layers.push_back(v.get<int>());
    }
    o.drop_layers = layers;
  }
  for (const char* key : {"mode", "window"}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string()) return TypeError(key, "a string");
    (std::string(key) == "mode" ? o.mode : o.window) = j[key].get<std::string>();
  }
  for (const char* key : {"top_p", "keep_ratio"}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number()) return TypeError(key, "a number");
    (std::string(key) == "top_p" ? o.top_p : o.keep_ratio) = j[key].get<float>();
  }
  for (const char* key : {"block_size", "sink", "last_n"}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number_integer()) return TypeError(key, "an integer");
    const int v = j[key].get<int>();
    if (std::string(key) == "block_size") o.block_size = v;
    if (std::string(key) == "sink") o.sink = v;
    if (std::string(key) == "last_n") o.last_n = v;
  }
  UP_RETURN_IF_ERROR(ValidateSelectionFields(o));
  ApplyKeepRatioImpliesFixedRatio(o);
  return o;
}

nlohmann::json UniPrefillOptionsToJson(const UniPrefillOptions& o) {
  nlohmann::json j = {{"enabled", o.enabled}};
  if (o.drop_layers) j["drop_layers"] = *o.drop_layers;
  if (o.mode) j["mode"] = *o.mode;
  if (o.top_p) j["top_p"] = *o.top_p;
  if (o.keep_ratio) j["keep_ratio"] = *o.keep_ratio;
  if (o.block_size) j["block_size"] = *o.block_size;
  if (o.sink) j["sink"] = *o.sink;
  if (o.last_n) j["last_n"] = *o.last_n;
  if (o.window) j["window"] = *o.window;
  return j;
}

Result<UniPrefillOptions> LoadUniPrefillOptionsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read UniPrefill config file '" + path + "'");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return InvalidArgument("UniPrefill config file '" + path + "' is not valid JSON");
  }
  auto options = UniPrefillOptionsFromJson(j);
  if (!options.ok()) {
    return InvalidArgument("UniPrefill config file '" + path + "': " + options.status().message());
  }
  options->source = "config " + path;
  return options;
}

}  // namespace uniprefill
