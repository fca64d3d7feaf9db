// Which row counts a GEMM tuner times, and which of a problem's candidate algorithms it keeps.
// Backend-free, so the rules are tested on the CPU; ops/cuda/gemm_algos.h (TuneGemms) runs them.
//
// Served steps run the model's few weight shapes at every row count up to the step budget, and
// cuBLASLt's heuristic picks per exact problem; on the H200 its first proposal was up to 30%
// slower than the fastest of its 16 for one GEMM at 384 rows, 5.4% for a layer at 2048 rows (24th
// session, CudaGemmAlgoThroughputTest). Timing every row count at start-up would take minutes,
// so rows are bucketed: a GEMM of r rows runs what was fastest at its bucket's top.
#pragma once

#include <cstdint>
#include <vector>

namespace uniprefill::ops {

struct GemmTuneRows {
  int64_t step = 64;       // bucket width in rows
  int64_t max_rows = 0;    // rows past this keep the heuristic's choice (whole prefills)
};

// The bucket (its top row count) a GEMM of `rows` rows takes its algorithm from, or 0 when rows
// is not positive or past max_rows.
int64_t GemmTuneBucket(int64_t rows, const GemmTuneRows& tune);

// Every bucket's top row count, ascending: step, 2 step, ..., max_rows rounded up to a step.
std::vector<int64_t> GemmTuneBuckets(const GemmTuneRows& tune);

// The candidate to keep given each one's time (candidate 0 is the heuristic's first): the fastest,
// unless it beats candidate 0 by no more than min_gain (a share, e.g. 0.02), so timing noise does
// not swap a problem's algorithm for nothing. Non-positive or non-finite times never win.
int PickGemmCandidate(const std::vector<double>& ms, double min_gain);

}  // namespace uniprefill::ops
