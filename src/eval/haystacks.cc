// Haystack texts and needle placement for the RULER tasks (see haystacks.h).
#include "eval/haystacks.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>

namespace uniprefill::eval {

std::string GenerateReportText(uint64_t seed, int words) {
  static constexpr const char* kSubjects[] = {
      "The harbour authority", "The city council", "The river survey team", "The museum board",
      "The rail operator", "The weather office", "The university library", "The hospital trust"};
  static constexpr const char* kVerbs[] = {"reported", "noted", "recorded", "announced",
                                           "confirmed", "estimated", "observed", "published"};
  static constexpr const char* kObjects[] = {
      "a rise in visitors during the spring festival", "repairs to the northern footbridge",
      "a new timetable for the coastal line", "record rainfall in the eastern valleys",
      "the restoration of three medieval manuscripts", "lower catches of herring than last year",
      "an extension of the evening opening hours", "the planting of two hundred oak trees"};
  static constexpr const char* kTails[] = {
      "Officials expect the trend to continue.", "Further details will follow next month.",
      "Residents were invited to comment.", "The figures were checked twice.",
      "The work is funded by a local grant.", "A second review is planned for the autumn."};
  std::mt19937_64 rng(seed);
  auto pick = [&](const auto& arr) { return arr[rng() % std::size(arr)]; };
  std::string out = "Annual report of the town of Westmere.\n";
  int count = 0, section = 1;
  while (count < words) {
    std::string para = "Section " + std::to_string(section++) + ". ";
    for (int s = 0; s < 3; ++s) {
      para += std::string(pick(kSubjects)) + " " + pick(kVerbs) + " " + pick(kObjects) + ". " +
              pick(kTails) + " ";
    }
    count += static_cast<int>(std::count(para.begin(), para.end(), ' '));
    out += para + "\n";
  }
  return out;
}

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Appends the sentences of `text` (split after a '.' followed by whitespace or the end) to `out`
// until it holds `count`.
void SplitSentences(const std::string& text, size_t count, std::vector<std::string>* out) {
  size_t start = 0;
  while (out->size() < count && start < text.size()) {
    while (start < text.size() && IsSpace(text[start])) ++start;
    size_t end = start;
    while (end < text.size() && !(text[end] == '.' && (end + 1 == text.size() ||
                                                      IsSpace(text[end + 1])))) {
      ++end;
    }
    if (end >= text.size()) break;  // an unfinished sentence: not a unit
    out->push_back(text.substr(start, end + 1 - start));
    start = end + 1;
  }
}

}  // namespace

std::vector<std::string> ReportSentences(uint64_t seed, size_t count) {
  // About 6.7 words per sentence; grow the text until it holds `count` sentences.
  size_t words = 8 * count + 64;
  for (;;) {
    std::vector<std::string> sentences;
    sentences.reserve(count);
    SplitSentences(GenerateReportText(seed, static_cast<int>(words)), count, &sentences);
    if (sentences.size() >= count) return sentences;
    words *= 2;
  }
}

std::string_view NoiseFiller() {
  return "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back "
         "again.";
}

HaystackWithNeedles InsertNeedles(const std::vector<std::string>& units, std::string_view separator,
                                  const std::vector<std::string>& needles,
                                  const std::vector<double>& depths) {
  const size_t sep = separator.size();
  // unit_offset[b]: where unit b would start if no needle came before it; b = units.size() is the
  // end of the text (one separator past the last unit).
  std::vector<size_t> unit_offset(units.size() + 1, 0);
  for (size_t i = 0; i < units.size(); ++i) {
    unit_offset[i + 1] = unit_offset[i] + units[i].size() + sep;
  }
  size_t needle_bytes = 0;
  for (const std::string& n : needles) needle_bytes += n.size() + sep;
  const size_t elements = units.size() + needles.size();
  const double total =
      static_cast<double>(unit_offset.back() + needle_bytes - (elements > 0 ? sep : 0));

  // Pick each needle's boundary: its offset is unit_offset[b] + the bytes of the needles before it.
  std::vector<size_t> boundary(needles.size());
  size_t before = 0, min_b = 0;
  for (size_t i = 0; i < needles.size(); ++i) {
    const double want = std::clamp(depths[i], 0.0, 1.0) * total - static_cast<double>(before);
    auto it = std::lower_bound(unit_offset.begin() + static_cast<ptrdiff_t>(min_b),
                               unit_offset.end(), want,
                               [](size_t off, double w) { return static_cast<double>(off) < w; });
    size_t b = static_cast<size_t>(it - unit_offset.begin());
    if (b == unit_offset.size()) b = units.size();
    if (b > min_b && std::abs(static_cast<double>(unit_offset[b - 1]) - want) <=
                         std::abs(static_cast<double>(unit_offset[b]) - want)) {
      --b;
    }
    boundary[i] = min_b = b;
    before += needles[i].size() + sep;
  }

  HaystackWithNeedles out;
  out.text.reserve(static_cast<size_t>(total) + 1);
  out.needle_offsets.reserve(needles.size());
  // Every element but the first is preceded by the separator; returns where `element` starts.
  auto add = [&](std::string_view element) {
    if (!out.text.empty()) out.text.append(separator);
    const size_t at = out.text.size();
    out.text.append(element);
    return at;
  };
  size_t next = 0;
  for (size_t b = 0; b <= units.size(); ++b) {
    for (; next < needles.size() && boundary[next] == b; ++next) {
      out.needle_offsets.push_back(add(needles[next]));
    }
    if (b < units.size()) add(units[b]);
  }
  return out;
}

}  // namespace uniprefill::eval
