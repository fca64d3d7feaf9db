// RULER synthetic tasks: builds one sample (prompt, answer prefix, references) of a task at a
// target length in tokens, without external data.
//
// Goals: RULER's templates and task definitions (NVIDIA/RULER, scripts/data/synthetic) for the nine
// tasks that need no downloaded data; samples deterministic for (task, target_tokens, seed); the
// haystack fitted with the evaluated model's tokenizer (through a caller-supplied counter) so that
// prompt + generation budget <= target and >= 0.98 * target.
// Non-goals: qa_1 / qa_2 and niah_single_3 / niah_multikey_1 (they need SQuAD, HotpotQA or Paul
// Graham essays); RULER's in-context examples for vt and cwe; running a model (see ruler_scoring.h
// for scoring).
//
// Departures from RULER: the "essay" haystack is generated report prose (haystacks.h); words come
// from embedded lists and syllable pseudo-words (ruler_words.h); needle depths are drawn uniformly
// in [0, 1] (RULER: random insertion indices, or 40 fixed depths for essays) and placed at the unit
// boundary nearest that fraction of the context's bytes; the seed is mixed with the task name, so
// tasks of one seed differ. Kept from RULER: templates (including the singular niah template when
// one value is asked), needle sentences, "\n" between noise / needle lines and " " between essay
// sentences, RULER's query list "a, b, c, and d", the 4-hop vt chain, cwe 30x / 3x, fwe Zipf(2)
// with the top word written "..." (RULER's vocab[0] = '...', though its question says '....').
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace uniprefill::eval {

enum class RulerMetric { kStringMatchAll, kStringMatchPart };

struct RulerTaskInfo {
  std::string name;         // e.g. "niah_single_1"
  int max_new_tokens;       // generation budget: niah 128, vt 30, cwe 120, fwe 50
  RulerMetric metric;       // all nine tasks here use kStringMatchAll
  std::string description;  // one line for --help / tables
};

// The nine tasks, in this order: niah_single_1, niah_single_2, niah_multikey_2, niah_multikey_3,
// niah_multivalue, niah_multiquery, vt, cwe, fwe.
const std::vector<RulerTaskInfo>& RulerTasks();
// InvalidArgument listing the valid names when `name` is not one of them.
Result<const RulerTaskInfo*> FindRulerTask(std::string_view name);

// Counts the tokens of the model input built from a sample: the caller wraps `input` in the chat
// template, appends `answer_prefix` and tokenizes. Must be monotone in the length of input.
using PromptTokenCounter =
    std::function<int(const std::string& input, const std::string& answer_prefix)>;

struct RulerSample {
  std::string task;
  int target_tokens = 0;  // the length asked for
  int prompt_tokens = 0;  // counter(input, answer_prefix) of the returned sample
  std::string input;      // the user message: instruction + haystack with needles + question
  std::string answer_prefix;
  std::vector<std::string> references;  // strings the answer must contain
  int max_new_tokens = 0;
  RulerMetric metric = RulerMetric::kStringMatchAll;
  // Intended depth in [0, 1] of each inserted needle / chain line, in the order they appear.
  std::vector<double> needle_depths;
  std::vector<size_t> needle_offsets;  // byte offset in `input` where each needle starts
  size_t haystack_begin = 0, haystack_end = 0;  // byte range of the context inside `input`
};

// Deterministic for (task, target_tokens, seed). The haystack size (in task units: filler
// repetitions, sentences, distractor lines, list words) is fitted so that
// prompt_tokens + max_new_tokens <= target_tokens and >= 0.98 * target_tokens (unless one unit is
// more than 2% of the target), with at most ~15 calls of `count`. InvalidArgument with the minimum
// length when even the smallest instance does not fit, or when the target is beyond what the task
// can generate.
Result<RulerSample> MakeRulerSample(std::string_view task, int target_tokens, uint64_t seed,
                                    const PromptTokenCounter& count);

}  // namespace uniprefill::eval
