// A stand-in for the driver's libnvidia-ml with the six entry points GpuClockSampler
// (core/gpu_clock_sampler.h) calls, built as its own shared library for the CPU tests: one GPU at
// PCI bus id 0000:01:00.0 whose SM clock reads 1400, 1500, 1600, 1400, ... MHz and whose power
// reads 650 W. Return codes as NVML's: 0 success, 2 invalid argument, 6 not found.
#include <atomic>
#include <cstring>

extern "C" {

int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** device) {
  static int the_gpu = 0;
  if (bus == nullptr || std::strcmp(bus, "0000:01:00.0") != 0) return 6;
  *device = &the_gpu;
  return 0;
}

int nvmlDeviceGetClockInfo(void* device, int type, unsigned* mhz) {
  static std::atomic<unsigned> reads{0};
  if (device == nullptr || type != 1) return 2;  // only NVML_CLOCK_SM (1) is asked for
  *mhz = 1400 + 100 * (reads++ % 3);
  return 0;
}

int nvmlDeviceGetPowerUsage(void* device, unsigned* milliwatts) {
  if (device == nullptr) return 2;
  *milliwatts = 650000;
  return 0;
}

const char* nvmlErrorString(int code) { return code == 6 ? "Not Found" : "Invalid Argument"; }

}  // extern "C"
