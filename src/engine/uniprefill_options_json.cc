#include "engine/uniprefill_options_json.h"

#include <fstream>
#include <set>

namespace uniprefill {
namespace {

Status TypeError(const std::string& key, const std::string& expected) {
  return InvalidArgument("UniPrefill option '" + key + "' must be " + expected);
}

}  // namespace

Result<UniPrefillOptions> UniPrefillOptionsFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("UniPrefill options must be a JSON object");
  static const std::set<std::string> kKeys = {"enabled", "drop_layers", "mode",
                                              "top_p",   "keep_ratio",  "block_size",
                                              "sink",    "last_n",      "window"};
  for (const auto& [key, value] : j.items()) {
    if (!kKeys.count(key)) {
      return InvalidArgument("unknown UniPrefill option '" + key +
                             "' (known: enabled, drop_layers, mode, top_p, keep_ratio, "
                             "block_size, sink, last_n, window)");
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
