// The GPU's SM clock and board power while a benchmark runs, read through NVML (libnvidia-ml,
// which the NVIDIA driver installs; loaded at run time, so builds and machines without it work
// and say so). Why: under sustained load an H100 or H200 holds its 700 W limit by lowering the
// SM clock (1.3-1.7 GHz against 1.98 GHz boost; docs/gpu_performance.md, 28th and 29th
// sessions), so a timing means little without the clock it ran at; the benchmarks report the
// mean clock and power of their timed window beside each figure.
//
// Usage: Create for a device's PCI bus id (cudaDeviceGetPCIBusId's form, so that
// CUDA_VISIBLE_DEVICES's renumbering cannot point it at another GPU), then Start / Stop around
// each timed window; a thread of the sampler's own reads NVML every period_ms in between.
// SummarizeClockSamples is the pure part (tests feed it by hand).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace uniprefill {

struct ClockSample {
  unsigned sm_mhz = 0;
  double power_w = 0;
};

struct ClockSummary {
  int samples = 0;  // 0: nothing read (a window shorter than the period, or no NVML)
  double sm_mhz_mean = 0, sm_mhz_min = 0, sm_mhz_max = 0;
  double power_w_mean = 0;
};

// Means, minimum and maximum of evenly spaced samples (all zero when there are none).
ClockSummary SummarizeClockSamples(const std::vector<ClockSample>& samples);

struct GpuClockSamplerOptions {
  std::string library = "libnvidia-ml.so.1";  // the driver's NVML
  int period_ms = 50;
};

class GpuClockSampler {
 public:
  // Unavailable when the library cannot be loaded or initialised (a machine without the NVIDIA
  // driver), NotFound when NVML knows no GPU at pci_bus_id, InvalidArgument for a period < 1 ms.
  static Result<std::unique_ptr<GpuClockSampler>> Create(
      const std::string& pci_bus_id, const GpuClockSamplerOptions& options = {});
  ~GpuClockSampler();
  GpuClockSampler(const GpuClockSampler&) = delete;
  GpuClockSampler& operator=(const GpuClockSampler&) = delete;

  // One sample now (also how Create checks that the device answers, and what serve's /metrics
  // reports at each scrape). Safe beside a window: NVML's calls are thread-safe.
  Result<ClockSample> Read() const;
  // The GPU's PCI bus id as given to Create (a label for what Read reports).
  const std::string& pci_bus_id() const { return pci_bus_id_; }
  // A window: Start clears the samples and one is read at once, then every period; Stop ends
  // the window and summarises it. Stop without Start: zero samples. Pause stops reading and
  // keeps the window's samples; Resume reads again into it (one at once, then every period), so
  // a window can hold only the timed parts of a benchmark (bench step's timed forwards, not the
  // warm-up and prefix prefills between them; Stop first, then Resume around each timed part).
  void Start();
  void Pause();
  void Resume();
  ClockSummary Stop();

 private:
  struct Nvml;  // the library's handle and entry points
  GpuClockSampler(std::unique_ptr<Nvml> nvml, void* device, std::string pci_bus_id,
                  int period_ms);
  void Loop();

  std::unique_ptr<Nvml> nvml_;
  void* device_ = nullptr;  // nvmlDevice_t
  std::string pci_bus_id_;
  int period_ms_ = 50;
  std::mutex mu_;
  std::condition_variable cv_;
  bool sampling_ = false, quit_ = false;
  std::vector<ClockSample> samples_;  // under mu_
  std::thread thread_;
};

}  // namespace uniprefill
