// Runs long-document QA samples (eval/qa_tasks.h) through an Engine, dense and with UniPrefill,
// and aggregates exact match, keep ratios and prefill times per (length, depth) and per length.
// Used by `uniprefill eval qa`.
//
// Non-goals: sample generation (qa_tasks), scoring definitions (qa_scoring), printing.
// Invariants: a case's prompt ids are built once and reused for both settings, so dense and
// UniPrefill see identical inputs; decoding is greedy, so results are deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "eval/qa_corpus.h"
#include "eval/qa_tasks.h"
#include "eval/ruler_runner.h"
#include "uniprefill/engine.h"

namespace uniprefill::eval {

struct QaCase {
  QaSample sample;
  std::vector<int32_t> ids;  // chat template (when on) + input + answer prefix, with BOS
  int sample_index = 0;
};

// Sample `index` of each length gets depths[index % depths.size()], so every depth is asked
// equally often when samples is a multiple of the depth count. Fails on a length beyond the
// engine's context or one the corpus cannot fill, and on a model without a tokenizer.
Result<std::vector<QaCase>> BuildQaCases(const Engine& engine,
                                         const std::vector<CorpusPiece>& pieces,
                                         const std::vector<int>& lengths,
                                         const std::vector<double>& depths, int samples,
                                         uint64_t seed, ChatMode chat,
                                         const std::function<void()>& on_case = nullptr);

struct QaOutcome {
  bool exact = false;     // QaExactMatch
  bool contains = false;  // QaContainsAnswer
  double prefill_s = 0;   // time to first token
  double keep_ratio = 1;  // KeepRatio (uniprefill/engine.h): 1 = dense
  std::vector<KeptTokensInfo> kept;
  std::string prediction;
};

// Greedy, at most kQaMaxNewTokens tokens, stopping at a newline or the end of the turn.
Result<QaOutcome> RunQaCase(Engine& engine, const QaCase& c, bool uniprefill);

// Means over a group of cases; accuracies in 0..100.
struct QaCell {
  int length = 0;
  double depth = -1;  // the depth asked; -1: every depth of the length
  int samples = 0;
  double exact_match = 0, contains = 0, prefill_s = 0, keep_ratio = 0;
};

// One cell per (length, depth asked) in the order they first appear, or with by_depth false one
// per length.
std::vector<QaCell> AggregateQa(const std::vector<QaCase>& cases,
                                const std::vector<QaOutcome>& outcomes, bool by_depth);

}  // namespace uniprefill::eval
