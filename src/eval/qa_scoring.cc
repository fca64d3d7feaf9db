// Exact-match scoring of the long-document QA family (see qa_scoring.h).
#include "eval/qa_scoring.h"

#include <cctype>
#include <sstream>

namespace uniprefill::eval {
namespace {

bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

}  // namespace

std::string NormalizeAnswer(std::string_view text) {
  // SQuAD's order: lower, remove punctuation, remove articles, fix whitespace.
  std::string lowered;
  for (char c : text) {
    if (std::ispunct(static_cast<unsigned char>(c))) continue;
    lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::istringstream words(lowered);
  std::string out;
  for (std::string w; words >> w;) {
    if (w == "a" || w == "an" || w == "the") continue;
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

std::string ExtractAnswer(std::string_view prediction) {
  size_t begin = 0;
  while (begin < prediction.size() && IsSpace(prediction[begin])) ++begin;
  std::string_view rest = prediction.substr(begin);
  rest = rest.substr(0, rest.find_first_of("\r\n"));
  for (size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if ((c == '.' || c == '?' || c == '!') && (i + 1 == rest.size() || IsSpace(rest[i + 1]))) {
      return std::string(rest.substr(0, i + 1));
    }
  }
  return std::string(rest);
}

bool QaExactMatch(std::string_view prediction, std::string_view answer) {
  const std::string want = NormalizeAnswer(answer);
  return !want.empty() && NormalizeAnswer(ExtractAnswer(prediction)) == want;
}

bool QaContainsAnswer(std::string_view prediction, std::string_view answer) {
  const std::string want = NormalizeAnswer(answer);
  if (want.empty()) return false;
  // Padded with spaces so that only whole words match (built in steps: GCC 12 warns falsely on
  // " " + std::string temporaries with -Wrestrict).
  std::string haystack(1, ' '), needle(1, ' ');
  haystack += NormalizeAnswer(prediction);
  haystack += ' ';
  needle += want;
  needle += ' ';
  return haystack.find(needle) != std::string::npos;
}

}  // namespace uniprefill::eval
