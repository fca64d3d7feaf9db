// The facts of the long-document QA family: one short declarative sentence with a made-up but
// natural answer ("The maintenance window of the Lisbon office is on Thursdays."), the question
// that asks for it, and the opening of the answer that the model completes.
//
// Goals: deterministic for a seed; answers that no corpus contains and that the question alone
// cannot give away; answers free of '.', '?', '!' and newlines, so that the first sentence of a
// completion holds the whole answer (qa_scoring.h).
// Non-goals: paraphrased questions or multi-hop reasoning; this checks that the fact survives the
// prefill, not reading comprehension.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uniprefill::eval {

struct QaFact {
  std::string kind;           // the template, e.g. "code_name"
  std::string statement;      // the sentence placed in the document
  std::string question;       // asked after the document
  std::string answer_prefix;  // the answer's opening, e.g. "The code name of the Oslo project is"
  std::string answer;         // what completes it, e.g. "Bluefinch"
};

// The template names, in the order MakeQaFact draws from.
const std::vector<std::string>& QaFactKinds();

// A fact drawn from every template's pools with `seed`.
QaFact MakeQaFact(uint64_t seed);

}  // namespace uniprefill::eval
