#include "core/gpu_clock_sampler.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace uniprefill {

ClockSummary SummarizeClockSamples(const std::vector<ClockSample>& samples) {
  ClockSummary s;
  if (samples.empty()) return s;
  s.samples = static_cast<int>(samples.size());
  s.sm_mhz_min = s.sm_mhz_max = samples[0].sm_mhz;
  double mhz = 0, watts = 0;
  for (const ClockSample& c : samples) {
    mhz += c.sm_mhz;
    watts += c.power_w;
    s.sm_mhz_min = std::min<double>(s.sm_mhz_min, c.sm_mhz);
    s.sm_mhz_max = std::max<double>(s.sm_mhz_max, c.sm_mhz);
  }
  s.sm_mhz_mean = mhz / s.samples;
  s.power_w_mean = watts / s.samples;
  return s;
}

// NVML's C API as this file uses it (nvml.h is not needed to build: its enums are ints, its
// device handle a pointer). nvmlReturn_t 0 is NVML_SUCCESS; NVML_CLOCK_SM is 1 (GRAPHICS 0, SM 1,
// MEM 2, VIDEO 3); nvmlDeviceGetPowerUsage answers in milliwatts.
struct GpuClockSampler::Nvml {
  using InitFn = int (*)();
  using ShutdownFn = int (*)();
  using HandleByPciFn = int (*)(const char*, void**);
  using ClockFn = int (*)(void*, int, unsigned*);
  using PowerFn = int (*)(void*, unsigned*);
  using ErrorStringFn = const char* (*)(int);
  static constexpr int kSuccess = 0;
  static constexpr int kClockSm = 1;

  void* lib = nullptr;
  bool initialised = false;
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  HandleByPciFn handle_by_pci = nullptr;
  ClockFn clock = nullptr;
  PowerFn power = nullptr;
  ErrorStringFn error_string = nullptr;

  ~Nvml() {
    if (initialised) shutdown();
    if (lib != nullptr) dlclose(lib);
  }
  std::string Error(int code) const {
    const char* s = error_string != nullptr ? error_string(code) : nullptr;
    return s != nullptr ? std::string(s) : "NVML error " + std::to_string(code);
  }
};

Result<std::unique_ptr<GpuClockSampler>> GpuClockSampler::Create(
    const std::string& pci_bus_id, const GpuClockSamplerOptions& options) {
  if (options.period_ms < 1) {
    return InvalidArgument("GpuClockSampler: period_ms must be at least 1 (got " +
                           std::to_string(options.period_ms) + ")");
  }
  auto nvml = std::make_unique<Nvml>();
  nvml->lib = dlopen(options.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml->lib == nullptr) {
    const char* why = dlerror();
    return Unavailable("cannot load " + options.library + " (" + (why ? why : "not found") +
                       "): the NVIDIA driver installs it; without it no GPU clock is reported");
  }
  const auto symbol = [&](const char* name) { return dlsym(nvml->lib, name); };
  nvml->init = reinterpret_cast<Nvml::InitFn>(symbol("nvmlInit_v2"));
  nvml->shutdown = reinterpret_cast<Nvml::ShutdownFn>(symbol("nvmlShutdown"));
  nvml->handle_by_pci =
      reinterpret_cast<Nvml::HandleByPciFn>(symbol("nvmlDeviceGetHandleByPciBusId_v2"));
  nvml->clock = reinterpret_cast<Nvml::ClockFn>(symbol("nvmlDeviceGetClockInfo"));
  nvml->power = reinterpret_cast<Nvml::PowerFn>(symbol("nvmlDeviceGetPowerUsage"));
  nvml->error_string = reinterpret_cast<Nvml::ErrorStringFn>(symbol("nvmlErrorString"));
  if (!nvml->init || !nvml->shutdown || !nvml->handle_by_pci || !nvml->clock || !nvml->power) {
    return Unavailable(options.library + " lacks the NVML functions this needs (nvmlInit_v2, " +
                       "nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetClockInfo, " +
                       "nvmlDeviceGetPowerUsage): update the NVIDIA driver");
  }
  if (const int rc = nvml->init(); rc != Nvml::kSuccess) {
    return Unavailable("NVML did not initialise: " + nvml->Error(rc));
  }
  nvml->initialised = true;
  void* device = nullptr;
  if (const int rc = nvml->handle_by_pci(pci_bus_id.c_str(), &device); rc != Nvml::kSuccess) {
    return NotFound("NVML has no GPU at PCI bus id '" + pci_bus_id + "': " + nvml->Error(rc));
  }
  std::unique_ptr<GpuClockSampler> sampler(
      new GpuClockSampler(std::move(nvml), device, pci_bus_id, options.period_ms));
  UP_RETURN_IF_ERROR(sampler->Read().status());
  return sampler;
}

GpuClockSampler::GpuClockSampler(std::unique_ptr<Nvml> nvml, void* device,
                                 std::string pci_bus_id, int period_ms)
    : nvml_(std::move(nvml)),
      device_(device),
      pci_bus_id_(std::move(pci_bus_id)),
      period_ms_(period_ms) {
  thread_ = std::thread([this] { Loop(); });
}

GpuClockSampler::~GpuClockSampler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<ClockSample> GpuClockSampler::Read() const {
  ClockSample s;
  unsigned milliwatts = 0;
  if (const int rc = nvml_->clock(device_, Nvml::kClockSm, &s.sm_mhz); rc != Nvml::kSuccess) {
    return Unavailable("NVML cannot read the SM clock: " + nvml_->Error(rc));
  }
  if (const int rc = nvml_->power(device_, &milliwatts); rc != Nvml::kSuccess) {
    return Unavailable("NVML cannot read the board power: " + nvml_->Error(rc));
  }
  s.power_w = milliwatts / 1000.0;
  return s;
}

void GpuClockSampler::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    samples_.clear();
    sampling_ = true;
  }
  cv_.notify_all();
}

void GpuClockSampler::Pause() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    sampling_ = false;
  }
  cv_.notify_all();
}

void GpuClockSampler::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    sampling_ = true;
  }
  cv_.notify_all();
}

ClockSummary GpuClockSampler::Stop() {
  std::vector<ClockSample> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sampling_ = false;
    taken.swap(samples_);
  }
  cv_.notify_all();
  return SummarizeClockSamples(taken);
}

void GpuClockSampler::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return quit_ || sampling_; });
    if (quit_) return;
    // Read outside the lock (an NVML call takes ~0.1-1 ms); a sample that lands after Stop is
    // dropped.
    lock.unlock();
    Result<ClockSample> s = Read();
    lock.lock();
    if (sampling_ && s.ok()) samples_.push_back(*s);
    const auto period = std::chrono::milliseconds(period_ms_);
    cv_.wait_for(lock, period, [this] { return quit_ || !sampling_; });
  }
}

}  // namespace uniprefill
