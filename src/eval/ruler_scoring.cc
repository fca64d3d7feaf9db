// RULER's post-processing and string metrics (see ruler_scoring.h).
#include "eval/ruler_scoring.h"

#include <algorithm>
#include <cctype>

namespace uniprefill::eval {
namespace {

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Python's str.isspace() for ASCII.
bool IsPySpace(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u == ' ' || (u >= '\t' && u <= '\r') || (u >= 0x1c && u <= 0x1f);
}

}  // namespace

std::string PostprocessPrediction(std::string_view pred) {
  // re.sub(r'[\x00-\x1f]', '\n', pred.strip()).strip(): replacing first and stripping once gives
  // the same result, since every character the first strip removes is whitespace or becomes '\n'.
  std::string out(pred);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) <= 0x1f) c = '\n';
  }
  const auto first = std::find_if_not(out.begin(), out.end(), IsPySpace);
  const auto last = std::find_if_not(out.rbegin(), out.rend(), IsPySpace).base();
  return first < last ? std::string(first, last) : std::string();
}

double StringMatchAll(std::string_view pred, const std::vector<std::string>& refs) {
  if (refs.empty()) return 0.0;
  const std::string p = AsciiLower(pred);
  const auto found = std::count_if(refs.begin(), refs.end(), [&](const std::string& r) {
    return p.find(AsciiLower(r)) != std::string::npos;
  });
  return static_cast<double>(found) / static_cast<double>(refs.size());
}

double StringMatchPart(std::string_view pred, const std::vector<std::string>& refs) {
  const std::string p = AsciiLower(pred);
  const bool any = std::any_of(refs.begin(), refs.end(), [&](const std::string& r) {
    return p.find(AsciiLower(r)) != std::string::npos;
  });
  return any ? 1.0 : 0.0;
}

double ScoreRulerPrediction(const RulerSample& sample, std::string_view prediction) {
  const std::string pred = PostprocessPrediction(prediction);
  switch (sample.metric) {
    case RulerMetric::kStringMatchAll: return 100.0 * StringMatchAll(pred, sample.references);
    case RulerMetric::kStringMatchPart: return 100.0 * StringMatchPart(pred, sample.references);
  }
  return 0.0;
}

}  // namespace uniprefill::eval
