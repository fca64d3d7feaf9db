// Documents with one inserted fact (see qa_haystack.h).
#include "eval/qa_haystack.h"

#include <algorithm>
#include <cmath>

namespace uniprefill::eval {

QaDocument BuildQaDocument(const std::vector<CorpusPiece>& pieces, size_t start, size_t count,
                           std::string_view fact, double depth) {
  const size_t n = pieces.size();
  auto piece = [&](size_t i) -> const CorpusPiece& { return pieces[(start + i) % n]; };
  auto separator = [&](size_t i) -> std::string_view {  // what follows piece i
    return piece(i).paragraph_end ? "\n\n" : " ";
  };
  // offset[b]: corpus bytes before boundary b (b = count: the end, no separator after the last).
  std::vector<size_t> offset(count + 1, 0);
  for (size_t i = 0; i < count; ++i) {
    offset[i + 1] = offset[i] + piece(i).text.size() + (i + 1 < count ? separator(i).size() : 0);
  }
  const double total = static_cast<double>(offset[count]);
  const double want = std::clamp(depth, 0.0, 1.0) * total;
  size_t best = 0;
  for (size_t b = 1; b <= count; ++b) {
    if (b < count && !piece(b - 1).boundary_after) continue;
    if (std::abs(static_cast<double>(offset[b]) - want) <
        std::abs(static_cast<double>(offset[best]) - want)) {
      best = b;
    }
  }

  QaDocument doc;
  doc.text.reserve(offset[count] + fact.size() + 2);
  auto add_fact = [&] {
    doc.fact_offset = doc.text.size();
    doc.text.append(fact);
  };
  for (size_t i = 0; i < count; ++i) {
    if (i == best) {
      add_fact();
      doc.text += ' ';  // the fact opens the sentence run that follows it
    }
    doc.text += piece(i).text;
    if (i + 1 < count) {
      doc.text.append(separator(i));
    } else if (best == count) {
      doc.text += piece(i).paragraph_end ? "\n\n" : " ";
      add_fact();
    }
  }
  doc.depth = total > 0 ? static_cast<double>(offset[best]) / total : 0;
  return doc;
}

size_t SentenceStartAtOrAfter(const std::vector<CorpusPiece>& pieces, size_t index) {
  const size_t n = pieces.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (index + k) % n;
    if (i == 0 || pieces[i - 1].boundary_after) return i;
  }
  return 0;
}

}  // namespace uniprefill::eval
