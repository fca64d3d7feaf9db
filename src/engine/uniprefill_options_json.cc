#include "engine/uniprefill_options_json.h"

#include <charconv>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "sparsity/token_selection.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill {
namespace {

using nlohmann::json;

Status TypeError(std::string_view key, const std::string& expected) {
  return InvalidArgument("UniPrefill option '" + std::string(key) + "' must be " + expected);
}

// Whether an integer JSON value fits T: json's get<T>() would wrap 4294967360 to 64.
template <typename T>
bool FitsInteger(const json& v) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  }
  const int64_t x = v.get<int64_t>();
  return x >= int64_t{std::numeric_limits<T>::min()} && x <= int64_t{std::numeric_limits<T>::max()};
}

Status OutOfIntRange(std::string_view key, const json& v) {
  return InvalidArgument("UniPrefill option '" + std::string(key) + "': " + v.dump() +
                         " is outside the range of a 32-bit integer");
}

// --- readers: JSON value -> field (type and range checked) ---------------------------------------

Status ReadEnabled(const json& v, UniPrefillOptions& o) {
  if (!v.is_boolean()) return TypeError("enabled", "true or false");
  o.enabled = v.get<bool>();
  return OkStatus();
}

Status ReadDropLayers(const json& v, UniPrefillOptions& o) {
  const std::string expected = "an array of layer indices";
  if (!v.is_array()) return TypeError("drop_layers", expected);
  std::vector<int> layers;
  for (const json& x : v) {
    if (!x.is_number_integer()) return TypeError("drop_layers", expected);
    if (!FitsInteger<int>(x)) return OutOfIntRange("drop_layers", x);
    layers.push_back(x.get<int>());
  }
  o.drop_layers = layers;
  return OkStatus();
}

Status ReadMode(const json& v, UniPrefillOptions& o) {
  const auto mode = v.is_string() ? SelectionModeFromString(v.get<std::string>()) : std::nullopt;
  if (!mode) return TypeError("mode", "\"top-p\" or \"fixed-ratio\" (got " + v.dump() + ")");
  o.mode = *mode;
  return OkStatus();
}

Status ReadWindow(const json& v, UniPrefillOptions& o) {
  const auto window = v.is_string() ? WindowModeFromString(v.get<std::string>()) : std::nullopt;
  if (!window) return TypeError("window", "\"alive\" or \"position\" (got " + v.dump() + ")");
  o.window = *window;
  return OkStatus();
}

// A number of the selection (top_p, keep_ratio, block_size, sink, last_n): type checked, range
// checked by the engine's own rule (sparsity::ValidateSelectionParams on otherwise valid
// defaults, so the error is this field's), then stored.
template <typename T>
Status ReadSelectionNumber(const json& v, std::string_view key,
                           std::optional<T> UniPrefillOptions::*field,
                           T sparsity::SelectionParams::*param, UniPrefillOptions& o) {
  constexpr bool kInteger = std::is_integral_v<T>;
  if (kInteger ? !v.is_number_integer() : !v.is_number()) {
    return TypeError(key, kInteger ? "an integer" : "a number");
  }
  if constexpr (kInteger) {
    if (!FitsInteger<T>(v)) return OutOfIntRange(key, v);
  }
  const T x = v.get<T>();
  sparsity::SelectionParams p;
  p.*param = x;
  if (Status s = sparsity::ValidateSelectionParams(p); !s.ok()) {
    return InvalidArgument("UniPrefill option '" + std::string(key) + "': " + s.message());
  }
  o.*field = x;
  return OkStatus();
}

using Params = sparsity::SelectionParams;
Status ReadTopP(const json& v, UniPrefillOptions& o) {
  return ReadSelectionNumber(v, "top_p", &UniPrefillOptions::top_p, &Params::top_p, o);
}
Status ReadKeepRatio(const json& v, UniPrefillOptions& o) {
  return ReadSelectionNumber(v, "keep_ratio", &UniPrefillOptions::keep_ratio, &Params::keep_ratio,
                             o);
}
Status ReadBlockSize(const json& v, UniPrefillOptions& o) {
  return ReadSelectionNumber(v, "block_size", &UniPrefillOptions::block_size, &Params::block_size,
                             o);
}
Status ReadSink(const json& v, UniPrefillOptions& o) {
  return ReadSelectionNumber(v, "sink", &UniPrefillOptions::sink, &Params::sink, o);
}
Status ReadLastN(const json& v, UniPrefillOptions& o) {
  return ReadSelectionNumber(v, "last_n", &UniPrefillOptions::last_n, &Params::last_n, o);
}

// --- writers: field -> JSON (null when unset) ----------------------------------------------------

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json();
}
json WriteEnabled(const UniPrefillOptions& o) { return o.enabled; }
json WriteDropLayers(const UniPrefillOptions& o) { return Opt(o.drop_layers); }
json WriteMode(const UniPrefillOptions& o) { return o.mode ? json(ToString(*o.mode)) : json(); }
json WriteWindow(const UniPrefillOptions& o) {
  return o.window ? json(ToString(*o.window)) : json();
}
json WriteTopP(const UniPrefillOptions& o) { return Opt(o.top_p); }
json WriteKeepRatio(const UniPrefillOptions& o) { return Opt(o.keep_ratio); }
json WriteBlockSize(const UniPrefillOptions& o) { return Opt(o.block_size); }
json WriteSink(const UniPrefillOptions& o) { return Opt(o.sink); }
json WriteLastN(const UniPrefillOptions& o) { return Opt(o.last_n); }

// --- flag text -> JSON value ---------------------------------------------------------------------

Result<json> OnOffText(std::string_view t) {
  if (t == "on") return json(true);
  if (t == "off") return json(false);
  return InvalidArgument("expected on or off (got '" + std::string(t) + "')");
}

Result<json> LayerListText(std::string_view t) {
  UP_ASSIGN_OR_RETURN(std::vector<int> layers, ParseLayerList(std::string(t)));
  return json(layers);
}

Result<json> StringText(std::string_view t) { return json(std::string(t)); }

// The whole text as a T (float or int), as JSON.
template <typename T>
Result<json> WholeText(std::string_view t) {
  T x{};
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
    return InvalidArgument(std::string(std::is_integral_v<T> ? "expected an integer"
                                                             : "expected a number") +
                           " (got '" + std::string(t) + "')");
  }
  return json(x);
}
Result<json> NumberText(std::string_view t) { return WholeText<float>(t); }
Result<json> IntegerText(std::string_view t) { return WholeText<int>(t); }

// The table. Help texts are what `--help` prints.
constexpr UniPrefillField kFields[] = {
    {"enabled", "--uniprefill", "on|off", "Token dropping in prefill: on or off", ReadEnabled,
     WriteEnabled, OnOffText},
    {"drop_layers", "--drop-layers", "LAYERS",
     "Full-attention layers that select tokens, e.g. 7,11,15 (default: the model's)",
     ReadDropLayers, WriteDropLayers, LayerListText},
    {"mode", "--uniprefill-mode", "top-p|fixed-ratio",
     "Selection: top-p or fixed-ratio (a keep ratio given without a mode means fixed-ratio)",
     ReadMode, WriteMode, StringText},
    {"top_p", "--uniprefill-p", "P", "Keep blocks holding this share of attention (top-p mode)",
     ReadTopP, WriteTopP, NumberText},
    {"keep_ratio", "--keep-ratio", "R",
     "Fraction of blocks kept per drop layer (fixed-ratio mode)", ReadKeepRatio, WriteKeepRatio,
     NumberText},
    {"block_size", "--block-size", "G", "Tokens per scored block (G)", ReadBlockSize,
     WriteBlockSize, IntegerText},
    {"sink", "--sink", "S", "First tokens always kept (S)", ReadSink, WriteSink, IntegerText},
    {"last_n", "--last-n", "N", "Observation window: last tokens that score, always kept (n)",
     ReadLastN, WriteLastN, IntegerText},
    {"window", "--window-mode", "alive|position",
     "Sliding windows after a drop count alive tokens (alive, the reference) or positions "
     "(position)",
     ReadWindow, WriteWindow, StringText},
};

const UniPrefillField* FindField(std::string_view key) {
  for (const UniPrefillField& f : kFields) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

}  // namespace

std::span<const UniPrefillField> UniPrefillFields() { return kFields; }

std::string UniPrefillOptionKeys() {
  std::string keys;
  for (const UniPrefillField& f : kFields) keys += (keys.empty() ? "" : ", ") + std::string(f.key);
  return keys;
}

void ApplyKeepRatioImpliesFixedRatio(UniPrefillOptions& o) {
  if (o.keep_ratio && !o.mode) o.mode = SelectionMode::kFixedRatio;
}

Result<UniPrefillOptions> UniPrefillOptionsFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("UniPrefill options must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (FindField(key) == nullptr) {
      return InvalidArgument("unknown UniPrefill option '" + key + "' (known: " +
                             UniPrefillOptionKeys() + ")");
    }
  }
  UniPrefillOptions o;
  for (const UniPrefillField& f : kFields) {
    const auto it = j.find(f.key);
    if (it != j.end()) UP_RETURN_IF_ERROR(f.read(*it, o));
  }
  ApplyKeepRatioImpliesFixedRatio(o);
  return o;
}

json UniPrefillOptionsToJson(const UniPrefillOptions& o) {
  json j = json::object();
  for (const UniPrefillField& f : kFields) {
    json v = f.write(o);
    if (!v.is_null()) j[std::string(f.key)] = std::move(v);
  }
  return j;
}

Result<UniPrefillOptions> LoadUniPrefillOptionsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read UniPrefill config file '" + path + "'");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
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
