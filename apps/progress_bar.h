// A stderr progress bar for long work (loading, long prefills). On a terminal it redraws one line;
// elsewhere (logs, CI) it prints a line at every quarter so logs stay short.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace uniprefill::cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, std::string unit, bool enabled);
  void Update(int64_t done, int64_t total);
  void Finish();

 private:
  std::string label_, unit_;
  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  int last_quarter_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace uniprefill::cli
