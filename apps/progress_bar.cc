#include "progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace uniprefill::cli {

ProgressBar::ProgressBar(std::string label, std::string unit, bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {}

void ProgressBar::Update(int64_t done, int64_t total) {
  if (!enabled_ || total <= 0) return;
  const double frac = static_cast<double>(done) / total;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(filled, '#');
    bar.resize(kWidth, ' ');
    std::fprintf(stderr, "\r%s [%s] %lld/%lld %s %.1fs", label_.c_str(), bar.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total), unit_.c_str(), secs);
    drawn_ = true;
  } else {
    const int quarter = static_cast<int>(frac * 4);
    if (quarter > last_quarter_) {
      last_quarter_ = quarter;
      std::fprintf(stderr, "%s: %3.0f%% (%lld/%lld %s, %.1fs)\n", label_.c_str(), frac * 100,
                   static_cast<long long>(done), static_cast<long long>(total), unit_.c_str(),
                   secs);
    }
  }
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (enabled_ && tty_ && drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace uniprefill::cli
