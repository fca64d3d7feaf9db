// The document of one long-document QA sample: consecutive corpus pieces with one fact sentence
// inserted at a chosen depth.
//
// Goals: the fact appears exactly once, whole, between two sentences (never inside one); its depth
// (the share of the corpus text before it) is the nearest that sentence boundaries allow to the
// depth asked for; the text for n pieces is the corpus text itself (pieces joined by " ", or by a
// blank line where a paragraph ended).
// Non-goals: fitting to a token count (qa_tasks.h does that by choosing the piece count).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "eval/qa_corpus.h"

namespace uniprefill::eval {

struct QaDocument {
  std::string text;
  size_t fact_offset = 0;  // byte offset of the fact sentence in `text`
  // Corpus bytes before the fact / corpus bytes in the document (separators included, the fact
  // and its own separator not): 0 = the fact opens the document, 1 = it closes it.
  double depth = 0;
};

// Pieces start, start + 1, ... (count of them; indices wrap around the end of `pieces`, whose
// last piece ends a paragraph) with `fact` inserted at the allowed boundary nearest `depth`
// (clamped to [0, 1]). Boundaries allowed: the document's start and end, and after every piece
// with boundary_after. count must be in [1, pieces.size()].
QaDocument BuildQaDocument(const std::vector<CorpusPiece>& pieces, size_t start, size_t count,
                           std::string_view fact, double depth);

// The index of the first piece of a sentence nearest at or after `index` (wrapping): where a
// document may start.
size_t SentenceStartAtOrAfter(const std::vector<CorpusPiece>& pieces, size_t index);

}  // namespace uniprefill::eval
