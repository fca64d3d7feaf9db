// One long-document QA sample (`uniprefill eval qa`): a corpus excerpt with one fact at a chosen
// depth, the question about it, and the answer's opening, fitted to a target length in tokens.
//
// Goals: deterministic for (pieces, target, depth, seed); prompt_tokens + max_new_tokens <= target
// and, unless one piece is more than the rest of the budget, close to it (the fit is to a whole
// piece, at most kMaxPieceWords words); at most ~30 calls of the counter.
// Non-goals: running a model (qa_runner.h) or scoring (qa_scoring.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "eval/qa_corpus.h"
#include "eval/qa_facts.h"
#include "eval/ruler_tasks.h"

namespace uniprefill::eval {

// Tokens generated per answer: the answers are a few words; the engine stops at a newline.
inline constexpr int kQaMaxNewTokens = 16;

struct QaSample {
  int target_tokens = 0;
  int prompt_tokens = 0;  // counter(input, answer_prefix)
  QaFact fact;
  std::string input;          // the user message: instruction, document, question
  std::string answer_prefix;  // the answer's opening (fact.answer_prefix)
  double depth_asked = 0;
  double depth = 0;            // the fact's depth in the document (QaDocument::depth)
  size_t fact_offset = 0;      // byte offset of the fact sentence in `input`
  size_t document_begin = 0, document_end = 0;  // byte range of the document in `input`
  size_t first_piece = 0, pieces = 0;           // the corpus pieces the document holds
};

// The user message for a document and a question.
std::string QaInput(const std::string& document, const QaFact& fact);

// Draws the fact and the excerpt's first piece from `seed`, then takes the most pieces whose
// prompt fits `target_tokens` less kQaMaxNewTokens. InvalidArgument when even one piece does not
// fit (naming the smallest length that does) or when the whole corpus is shorter than the target.
Result<QaSample> MakeQaSample(const std::vector<CorpusPiece>& pieces, int target_tokens,
                              double depth, uint64_t seed, const PromptTokenCounter& count);

}  // namespace uniprefill::eval
