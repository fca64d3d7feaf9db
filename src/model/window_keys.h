// The keys a chunk's rows see inside a sliding window, in closed form: the scheduler's window
// price (SegmentCost::window_key_cost) and the CPU calibration's count of the keys a deeper prefix
// adds (BatchEngine::CalibrateStepBudget) read the same sum.
#pragma once

#include <algorithm>

namespace uniprefill {

// Keys rows [0, rows) after `prefix` cached rows see inside a window of `window`: the sum over
// the rows of min(prefix + i + 1, window); 0 without a window.
inline double WindowKeys(int prefix, double rows, int window) {
  if (window <= 0 || rows <= 0) return 0;
  const double below = std::clamp(double(window) - prefix - 1, 0.0, rows);  // rows short of it
  return below * (prefix + 1) + below * (below - 1) / 2 + (rows - below) * window;
}

}  // namespace uniprefill
