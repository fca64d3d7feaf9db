// Haystacks for the RULER tasks: the filler texts a needle is hidden in, and the placement of
// needles at chosen depths.
//
// Goals: deterministic text for a seed; a haystack of n units is a prefix of one of n + 1 units (so
// its token count grows with n and can be fitted by search); needles land at unit boundaries at the
// depth asked for, measured in bytes of the finished context.
// Non-goals: natural prose. RULER's "essay" haystack (Paul Graham essays) is replaced by generated
// report prose, so no external data is needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace uniprefill::eval {

// Report-style filler prose of at least `words` words ("Annual report of the town of Westmere." and
// numbered sections of short sentences). The text for a larger `words` extends the text for a
// smaller one. Same output as the generator of `uniprefill eval fidelity`.
std::string GenerateReportText(uint64_t seed, int words);

// The first `count` sentences of GenerateReportText(seed, ...), each trimmed of whitespace and
// ending in '.'; RULER's essay haystack is likewise a list of sentences joined with " ".
std::vector<std::string> ReportSentences(uint64_t seed, size_t count);

// RULER's "noise" haystack unit.
std::string_view NoiseFiller();

struct HaystackWithNeedles {
  std::string text;
  std::vector<size_t> needle_offsets;  // byte offset of each needle in `text`, in needle order
};

// Joins `units` with `separator`, inserting each needle as one more element at a unit boundary.
// depths (same length as needles) must be sorted ascending in [0, 1]; needle i goes to the boundary
// (not before needle i - 1's) whose byte offset in the finished text, divided by the text's length,
// is nearest depths[i].
HaystackWithNeedles InsertNeedles(const std::vector<std::string>& units, std::string_view separator,
                                  const std::vector<std::string>& needles,
                                  const std::vector<double>& depths);

}  // namespace uniprefill::eval
