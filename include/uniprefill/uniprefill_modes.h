// The UniPrefill selection mode and sliding-window mode: one enum each, used from the public
// options (UniPrefillOptions) down to the selection and the layers, and their one text form (the
// command-line values and the JSON strings of config files and the HTTP extension).
#pragma once

#include <optional>
#include <string_view>

namespace uniprefill {

// How a drop layer picks blocks: up to attention mass p, or a fixed share of them.
enum class SelectionMode { kTopP, kFixedRatio };

// How a sliding-window layer counts its window after a drop.
enum class WindowMode {
  kAliveIndex,  // the last W alive tokens (the reference: a paged cache of compacted tokens)
  kPosition,    // keys whose original position is within W of the query's
};

// "top-p", "fixed-ratio".
constexpr std::string_view ToString(SelectionMode m) {
  return m == SelectionMode::kTopP ? "top-p" : "fixed-ratio";
}
// "alive", "position".
constexpr std::string_view ToString(WindowMode m) {
  return m == WindowMode::kAliveIndex ? "alive" : "position";
}
// The inverse of ToString; nullopt for any other text.
constexpr std::optional<SelectionMode> SelectionModeFromString(std::string_view s) {
  if (s == "top-p") return SelectionMode::kTopP;
  if (s == "fixed-ratio") return SelectionMode::kFixedRatio;
  return std::nullopt;
}
constexpr std::optional<WindowMode> WindowModeFromString(std::string_view s) {
  if (s == "alive") return WindowMode::kAliveIndex;
  if (s == "position") return WindowMode::kPosition;
  return std::nullopt;
}

}  // namespace uniprefill
