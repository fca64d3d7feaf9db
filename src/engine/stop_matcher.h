// Stop conditions of an OpenAI-compatible request: stop strings matched on the streamed text
// (StopMatcher) and stop token ids (StopTokens).
//
// StopMatcher consumes the detokenized text piece by piece and says what may be sent to the client
// now. It holds back the longest suffix that could still grow into a stop string, and any
// incomplete UTF-8 character at the end, so no byte of a stop string is ever sent and `emit` never
// splits a multibyte character. When a stop string completes, the text before it is emitted and
// the stop string itself is not (OpenAI's behaviour); everything after it is dropped. A Push costs
// O(held bytes * total stop-string bytes): stop strings are short.
//
// Invariants:
//   - The result depends only on the concatenated text, never on how it was split into pieces:
//     the stop is the one that completes first reading byte by byte (the smallest end position;
//     on a tie, the one starting first, i.e. the longest), and the concatenation of all `emit`s
//     plus Flush() is the text up to that stop (or the whole text when none matched).
//   - After a stop, Push() and Flush() return nothing.
//   - With no stop strings, text passes through at once (less any incomplete UTF-8 tail).
//
// Not for: detokenization (tokenizer::StreamDecoder), EOS detection (the tokenizer knows the
// model's end ids), max_tokens (the engine counts tokens), include_stop_str_in_output.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace uniprefill {

inline constexpr int kMaxStopStrings = 4;  // OpenAI's limit on `stop`

// Checks a request's `stop`: at most kMaxStopStrings strings, none empty.
Status ValidateStopStrings(std::span<const std::string> stops);

// Checks a request's `stop_token_ids`: every id inside [0, vocab_size).
Status ValidateStopTokenIds(std::span<const int32_t> ids, int vocab_size);

struct StopResult {
  std::string emit;      // text that may be sent now
  bool stopped = false;  // a stop string completed: finish with reason "stop"
  int stop_index = -1;   // which stop string (index into the constructor's list), -1 if none
};

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored (ValidateStopStrings rejects them in requests).
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds the next piece of generated text.
  StopResult Push(std::string_view piece);
  // The generation ended without a stop string: returns everything held back.
  std::string Flush();

  bool stopped() const { return stop_index_ >= 0; }

 private:
  // Bytes at the end of pending_ that must wait: a possible stop-string start or a partial
  // UTF-8 character.
  size_t HeldBackBytes() const;

  std::vector<std::string> stops_;
  std::string pending_;  // text received but not yet emitted
  int stop_index_ = -1;  // the stop string that matched, -1 while none has
};

// Token ids that end generation when sampled: a request's `stop_token_ids`, to which the engine may
// add the model's EOS / end-of-turn ids. The stop token itself is not emitted as text.
struct StopTokens {
  std::vector<int32_t> ids = {};

  bool IsStopToken(int32_t id) const;
};

}  // namespace uniprefill
