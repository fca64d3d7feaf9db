// HfConfig: typed, read-only access to a Hugging Face `config.json` (and its nested objects such as
// `rope_scaling`, or the `text_config` of a multimodal Gemma 3 config).
//
// Goals: every getter returns a Result whose error names the file, the full key path
// (e.g. "text_config.sliding_window") and, for a type mismatch, the value found; bad JSON is a
// DataLoss naming the file and the parse position. Nothing throws across this interface.
// Non-goals: interpreting keys (model configs do that), writing configs.
// Conventions: a key whose value is JSON null counts as absent (HF writes `"rope_scaling": null`
// for "not set"): Has() is false and the *Or getters return their default. GetInt accepts a number
// with an integral value (e.g. 8192.0); GetFloat accepts any number.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace uniprefill {

class HfConfig {
 public:
  // Reads and parses `path` (a config.json). Errors: NotFound (missing/unreadable), DataLoss (not
  // JSON, or not a JSON object at the top).
  static Result<HfConfig> Load(const std::string& path);
  // Parses `text`; `source` names it in errors (tests).
  static Result<HfConfig> Parse(std::string_view text, const std::string& source = "<memory>");

  // The file and, for a Sub() config, the key path: "path/config.json" or "...: text_config".
  std::string Where() const;

  // Present and not null.
  bool Has(std::string_view key) const;
  // Keys of this object, sorted.
  std::vector<std::string> Keys() const;

  // NotFound if absent or null; InvalidArgument (naming the value) if the type does not fit.
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;
  Result<std::string> GetString(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntList(std::string_view key) const;
  Result<std::vector<double>> GetFloatList(std::string_view key) const;
  Result<std::vector<std::string>> GetStringList(std::string_view key) const;

  // `fallback` if absent or null; still InvalidArgument if present with the wrong type.
  Result<int64_t> GetIntOr(std::string_view key, int64_t fallback) const;
  Result<double> GetFloatOr(std::string_view key, double fallback) const;
  Result<std::string> GetStringOr(std::string_view key, const std::string& fallback) const;
  Result<bool> GetBoolOr(std::string_view key, bool fallback) const;

  // The nested object at `key` (NotFound if absent or null, InvalidArgument if not an object).
  Result<HfConfig> Sub(std::string_view key) const;
  // Multimodal configs (Gemma 3's Gemma3ForConditionalGeneration) keep the language model's keys
  // under "text_config"; this returns that object when present, else this config itself.
  Result<HfConfig> TextConfig() const;

  // The underlying JSON (for keys the getters do not cover); valid while any HfConfig sharing this
  // document lives.
  const nlohmann::json& json() const { return *node_; }

 private:
  HfConfig(std::shared_ptr<const nlohmann::json> root, const nlohmann::json* node,
           std::string source, std::string prefix)
      : root_(std::move(root)), node_(node), source_(std::move(source)), prefix_(std::move(prefix)) {}

  // The value at `key`, or nullptr if absent or null.
  const nlohmann::json* Lookup(std::string_view key) const;
  std::string KeyPath(std::string_view key) const;
  Status Missing(std::string_view key) const;
  Status WrongType(std::string_view key, const nlohmann::json& v, const char* expected) const;

  std::shared_ptr<const nlohmann::json> root_;  // keeps node_ alive
  const nlohmann::json* node_;
  std::string source_;  // file path
  std::string prefix_;  // "" at the top, "text_config." below it
};

// True when `path` is a directory holding a regular file named config.json.
bool IsHfCheckpointDir(const std::string& path);

}  // namespace uniprefill
