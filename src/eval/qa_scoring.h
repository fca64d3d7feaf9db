// Scoring of the long-document QA family: exact match after SQuAD's answer normalisation.
//
// Goals: the answer is what completes the answer prefix's sentence, so the prediction is cut at
// its first line and its first sentence end before comparing; normalisation is SQuAD's
// normalize_answer (lower case, punctuation removed, the articles a / an / the removed, runs of
// whitespace collapsed).
// Non-goals: F1 or partial credit; Unicode case folding or punctuation (ASCII only, as the
// answers are).
#pragma once

#include <string>
#include <string_view>

namespace uniprefill::eval {

// SQuAD normalize_answer for ASCII text.
std::string NormalizeAnswer(std::string_view text);

// The answer part of a generated continuation: leading whitespace dropped, cut before the first
// newline and after the first '.', '?' or '!' that is followed by whitespace or ends the text.
std::string ExtractAnswer(std::string_view prediction);

// NormalizeAnswer(ExtractAnswer(prediction)) == NormalizeAnswer(answer), and that is not empty.
bool QaExactMatch(std::string_view prediction, std::string_view answer);

// A looser diagnostic: the normalised answer appears as whole words anywhere in the normalised
// prediction (a model that restates the sentence or adds words still counts).
bool QaContainsAnswer(std::string_view prediction, std::string_view answer);

}  // namespace uniprefill::eval
