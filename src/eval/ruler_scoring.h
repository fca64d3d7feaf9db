// RULER scoring: the post-processing and the two string metrics of NVIDIA/RULER
// (scripts/eval/synthetic/constants.py and evaluate.py), for one prediction at a time.
//
// Goals: exactly RULER's definitions, so scores are comparable with published RULER numbers.
// Non-goals: averaging over samples and RULER's rounding to two decimals (callers aggregate).
// Case folding is ASCII-only (references here are ASCII); Python's str.lower() also folds Unicode.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "eval/ruler_tasks.h"

namespace uniprefill::eval {

// RULER postprocess_pred: strip, replace every control character [\x00-\x1f] with '\n', strip
// again (Python's str.strip: whitespace " \t\n\v\f\r" and \x1c-\x1f at both ends).
std::string PostprocessPrediction(std::string_view pred);

// string_match_all of one sample: the fraction in [0, 1] of `refs` found case-insensitively as
// substrings of `pred`; 0 when refs is empty.
double StringMatchAll(std::string_view pred, const std::vector<std::string>& refs);
// string_match_part of one sample: 1 if any of `refs` is found case-insensitively in `pred`, else
// 0.
double StringMatchPart(std::string_view pred, const std::vector<std::string>& refs);

// The score in [0, 100] of `prediction` (the generated text after the answer prefix) under the
// sample's metric, after PostprocessPrediction.
double ScoreRulerPrediction(const RulerSample& sample, std::string_view prediction);

}  // namespace uniprefill::eval
