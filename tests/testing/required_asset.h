// Files a test needs (the default model, tokenizer files, golden files): a missing one is a test
// failure, because scripts/setup.sh (which CI and scripts/test.sh always run) puts every one in
// place and the goldens are committed. A developer without them may set
// UNIPREFILL_ALLOW_MISSING_ASSETS=1 to turn those failures into skips; CI never sets it.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace uniprefill::testing {

inline constexpr const char* kAllowMissingAssetsVar = "UNIPREFILL_ALLOW_MISSING_ASSETS";

// The explicit opt-out: set and not "0".
inline bool MissingAssetsAllowed() {
  const char* v = std::getenv(kAllowMissingAssetsVar);
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

// "" when `path` exists; otherwise one line naming what is missing and how to get it.
inline std::string MissingAssetMessage(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return "";
  return std::string(what) + " missing at " + path.string() + " (scripts/setup.sh installs it)";
}

}  // namespace uniprefill::testing

// Fails the current test (or skips it, under the opt-out) when `why_missing` is not empty.
#define UP_FAIL_IF_ASSET_MISSING(why_missing)                                              \
  do {                                                                                     \
    const std::string _up_why = (why_missing);                                             \
    if (!_up_why.empty()) {                                                                \
      if (::uniprefill::testing::MissingAssetsAllowed()) GTEST_SKIP() << _up_why;          \
      FAIL() << _up_why << "; to skip such tests instead, set "                            \
             << ::uniprefill::testing::kAllowMissingAssetsVar << "=1";                     \
    }                                                                                      \
  } while (0)

// Fails (or, under the opt-out, skips) the current test unless `path` exists.
#define UP_REQUIRE_ASSET(path, what) \
  UP_FAIL_IF_ASSET_MISSING(::uniprefill::testing::MissingAssetMessage((path), (what)))
