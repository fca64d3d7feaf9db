#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace uniprefill {
namespace {

// Bytes at the end of `s` that begin a UTF-8 character whose continuation bytes have not arrived.
// Invalid bytes are never held (they would wait forever).
size_t IncompleteUtf8Tail(std::string_view s) {
  const size_t look = std::min<size_t>(3, s.size());
  for (size_t i = 1; i <= look; ++i) {
    const auto b = static_cast<unsigned char>(s[s.size() - i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t len = b >= 0xF8 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return len > i ? i : 0;
  }
  return 0;
}

}  // namespace

Status ValidateStopStrings(std::span<const std::string> stops) {
  if (std::ssize(stops) > kMaxStopStrings) {
    return InvalidArgument("stop may hold at most " + std::to_string(kMaxStopStrings) +
                           " strings, got " + std::to_string(stops.size()));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) {
      return InvalidArgument("stop[" + std::to_string(i) + "] is empty; remove it");
    }
  }
  return OkStatus();
}

Status ValidateStopTokenIds(std::span<const int32_t> ids, int vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return InvalidArgument(
          "stop_token_ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
          " is not a token id of this model (0 to " + std::to_string(vocab_size - 1) + ")");
    }
  }
  return OkStatus();
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

size_t StopMatcher::HeldBackBytes() const {
  const std::string_view text = pending_;
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    if (stop.empty()) continue;
    // The longest proper prefix of `stop` that `text` ends with (a full match was handled).
    for (size_t k = std::min(text.size(), stop.size() - 1); k > hold; --k) {
      if (text.ends_with(std::string_view(stop).substr(0, k))) {
        hold = k;
        break;
      }
    }
  }
  const size_t cut = text.size() - hold;
  return hold + IncompleteUtf8Tail(text.substr(0, cut));
}

StopResult StopMatcher::Push(std::string_view piece) {
  if (stopped()) return {"", true, stop_index_};
  pending_.append(piece);
  // The stop that completes first: smallest end, then smallest start. For one stop string its
  // first occurrence is its earliest end; none can end before this piece (earlier Pushes would
  // have seen it), and none can start in emitted text (HeldBackBytes kept every possible start).
  size_t best_pos = std::string::npos, best_end = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) continue;
    const size_t pos = pending_.find(stops_[i]);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stops_[i].size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_pos = pos;
      best_end = end;
      stop_index_ = static_cast<int>(i);
    }
  }
  if (stopped()) {
    StopResult r{pending_.substr(0, best_pos), true, stop_index_};
    pending_.clear();
    return r;
  }
  const size_t ready = pending_.size() - HeldBackBytes();
  StopResult r{pending_.substr(0, ready), false, -1};
  pending_.erase(0, ready);
  return r;
}

std::string StopMatcher::Flush() {
  if (stopped()) return "";
  return std::exchange(pending_, std::string());
}

bool StopTokens::IsStopToken(int32_t id) const {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace uniprefill
