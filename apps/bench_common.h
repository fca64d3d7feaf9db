// Small helpers the benchmark commands share: comma-separated flag lists, medians, the date, the
// GPU clock sampler.
#pragma once

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/environment.h"
#include "core/gpu_clock_sampler.h"

namespace uniprefill::cli {

// "1,8,32" -> {1, 8, 32}; false when any item does not parse as a whole T or the list is empty.
template <typename T>
bool ParseList(const std::string& text, std::vector<T>& out) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::stringstream is(item);
    T v;
    if (!(is >> v) || !is.eof()) return false;
    out.push_back(v);
  }
  return !out.empty();
}

// The median of v (the mean of the middle two for even sizes); v must not be empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The q-quantile of v by nearest rank (q in [0, 1]); v must not be empty.
inline double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// The UNIPREFILL_* variables this run was started with (diagnostics and launch choices,
// backend/cuda/cuda_diagnostics.h), recorded in benchmark JSON: two runs of one binary may differ
// by nothing else (the 32nd session's arms of old and new launch choices did).
inline std::map<std::string, std::string> BenchEnvironment() {
  return EnvironmentWithPrefix("UNIPREFILL_");
}

// Today's date in UTC, YYYY-MM-DD (recorded in benchmark JSON).
inline std::string Today() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

// The SM clock and power sampler of the GPU at pci_bus_id (core/gpu_clock_sampler.h), or null
// with one note on stderr saying why none (the benchmark then reports 0 for both).
inline std::unique_ptr<GpuClockSampler> ClockSamplerOrNote(const std::string& pci_bus_id) {
  Result<std::unique_ptr<GpuClockSampler>> made = GpuClockSampler::Create(pci_bus_id);
  if (made.ok()) return std::move(*made);
  std::fprintf(stderr, "note: no SM clock or power reported: %s\n",
               made.status().message().c_str());
  return nullptr;
}

}  // namespace uniprefill::cli
