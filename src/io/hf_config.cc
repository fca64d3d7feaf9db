#include "io/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace uniprefill {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uintmax_t kMaxConfigBytes = 16ull << 20;  // real configs are a few KB

// A JSON value in an error message, shortened.
std::string Show(const Json& j) {
  std::string s = j.dump();
  constexpr size_t kMax = 60;
  return s.size() > kMax ? s.substr(0, kMax) + "..." : s;
}

const char* TypeName(const Json& j) {
  if (j.is_number_integer()) return "an integer";
  if (j.is_number_float()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_boolean()) return "a bool";
  if (j.is_array()) return "a list";
  if (j.is_object()) return "an object";
  return "null";
}

std::optional<int64_t> AsInt(const Json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    const double d = j.get<double>();
    // Integral and inside int64 (2^63 itself is not).
    if (std::isfinite(d) && d == std::floor(d) && d >= -9.2233720368547758e18 &&
        d < 9.2233720368547758e18) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

std::optional<double> AsFloat(const Json& j) {
  if (j.is_number()) return j.get<double>();
  return std::nullopt;
}

}  // namespace

Result<HfConfig> HfConfig::Load(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return NotFound("config " + path + ": no such file");
  if (!fs::is_regular_file(st)) return NotFound("config " + path + ": not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return NotFound("config " + path + ": cannot read (" + ec.message() + ")");
  if (size > kMaxConfigBytes) {
    return DataLoss("config " + path + ": is " + std::to_string(size) +
                    " bytes, more than the limit of " + std::to_string(kMaxConfigBytes) +
                    " (not a config.json?)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("config " + path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

Result<HfConfig> HfConfig::Parse(std::string_view text, const std::string& source) {
  auto root = std::make_shared<Json>();
  try {
    *root = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return DataLoss("config " + source + ": invalid JSON (" + e.what() + ")");
  }
  if (!root->is_object()) {
    return DataLoss("config " + source + ": top level is " + TypeName(*root) +
                    ", expected a JSON object");
  }
  const Json* node = root.get();
  return HfConfig(std::move(root), node, source, "");
}

std::string HfConfig::Where() const {
  if (prefix_.empty()) return source_;
  return source_ + ": " + prefix_.substr(0, prefix_.size() - 1);
}

const Json* HfConfig::Lookup(std::string_view key) const {
  auto it = node_->find(key);
  if (it == node_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool HfConfig::Has(std::string_view key) const { return Lookup(key) != nullptr; }

std::vector<std::string> HfConfig::Keys() const {
  std::vector<std::string> keys;
  for (const auto& [k, v] : node_->items()) keys.push_back(k);
  return keys;  // nlohmann's default object is a std::map: already sorted
}

std::string HfConfig::KeyPath(std::string_view key) const {
  return prefix_ + std::string(key);
}

Status HfConfig::Missing(std::string_view key) const {
  const bool is_null = node_->contains(key);
  return NotFound("config " + source_ + ": key '" + KeyPath(key) + "' " +
                  (is_null ? "is null" : "not found"));
}

Status HfConfig::WrongType(std::string_view key, const Json& v, const char* expected) const {
  return InvalidArgument("config " + source_ + ": key '" + KeyPath(key) + "' is " + Show(v) +
                         " (" + TypeName(v) + "), expected " + expected);
}

Result<int64_t> HfConfig::GetInt(std::string_view key) const {
  const Json* v = Lookup(key);
  if (v == nullptr) return Missing(key);
  if (auto x = AsInt(*v)) return *x;
  return WrongType(key, *v, "an integer");
}

Result<double> HfConfig::GetFloat(std::string_view key) const {
  const Json* v = Lookup(key);
  if (v == nullptr) return Missing(key);
  if (auto x = AsFloat(*v)) return *x;
  return WrongType(key, *v, "a number");
}

Result<std::string> HfConfig::GetString(std::string_view key) const {
  const Json* v = Lookup(key);
  if (v == nullptr) return Missing(key);
  if (v->is_string()) return v->get<std::string>();
  return WrongType(key, *v, "a string");
}

Result<bool> HfConfig::GetBool(std::string_view key) const {
  const Json* v = Lookup(key);
  if (v == nullptr) return Missing(key);
  if (v->is_boolean()) return v->get<bool>();
  return WrongType(key, *v, "true or false");
}

Result<std::vector<int64_t>> HfConfig::GetIntList(std::string_view key) const {
  const Json* v = Lookup(key);
  if (v == nullptr) return Missing(key);
  if (!v->is_array()) return WrongType(key, *v, "a list of integers");
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    auto x = AsInt((*v)[i]);
    if (!x) {
      return WrongType(std::string(key) + "[" + std::to_string(i) + "]", (*v)[i], "an integer");
    }
    out.push_back(*x);
  }
  return out;
}

Result<std::vector<double>> HfConfig::GetFloatList(std::string_view key) const {
  const Json* v = Lookup(key);
  if (v == nullptr) return Missing(key);
  if (!v->is_array()) return WrongType(key, *v, "a list of numbers");
  std::vector<double> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    auto x = AsFloat((*v)[i]);
    if (!x) return WrongType(std::string(key) + "[" + std::to_string(i) + "]", (*v)[i], "a number");
    out.push_back(*x);
  }
  return out;
}

Result<std::vector<std::string>> HfConfig::GetStringList(std::string_view key) const {
  const Json* v = Lookup(key);
  if (v == nullptr) return Missing(key);
  if (!v->is_array()) return WrongType(key, *v, "a list of strings");
  std::vector<std::string> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return WrongType(std::string(key) + "[" + std::to_string(i) + "]", (*v)[i], "a string");
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

Result<int64_t> HfConfig::GetIntOr(std::string_view key, int64_t fallback) const {
  return Has(key) ? GetInt(key) : Result<int64_t>(fallback);
}

Result<double> HfConfig::GetFloatOr(std::string_view key, double fallback) const {
  return Has(key) ? GetFloat(key) : Result<double>(fallback);
}

Result<std::string> HfConfig::GetStringOr(std::string_view key, const std::string& fallback) const {
  return Has(key) ? GetString(key) : Result<std::string>(fallback);
}

Result<bool> HfConfig::GetBoolOr(std::string_view key, bool fallback) const {
  return Has(key) ? GetBool(key) : Result<bool>(fallback);
}

Result<HfConfig> HfConfig::Sub(std::string_view key) const {
  const Json* v = Lookup(key);
  if (v == nullptr) return Missing(key);
  if (!v->is_object()) return WrongType(key, *v, "an object");
  return HfConfig(root_, v, source_, KeyPath(key) + ".");
}

Result<HfConfig> HfConfig::TextConfig() const {
  if (Has("text_config")) return Sub("text_config");
  return *this;
}

bool IsHfCheckpointDir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) || ec) return false;
  return fs::is_regular_file(fs::path(path) / "config.json", ec) && !ec;
}

}  // namespace uniprefill
