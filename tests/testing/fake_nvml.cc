// A stand-in for the driver's libnvidia-ml with the six entry points GpuClockSampler
// (core/gpu_clock_sampler.h) calls, built as its own shared library for the CPU tests: a GPU at
// PCI bus id 0000:01:00.0 whose SM clock reads 1400, 1500, 1600, 1400, ... MHz and whose power
// reads 650 W, and a second at 0000:41:00.0 (a tensor-parallel job's other GPU) at a steady
// 1200 MHz and 300 W. Return codes as NVML's: 0 success, 2 invalid argument, 6 not found.
#include <atomic>
#include <cstring>

namespace {
int first_gpu = 0;
int second_gpu = 1;
}  // namespace

extern "C" {

int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** device) {
  if (bus == nullptr) return 2;
  if (std::strcmp(bus, "0000:01:00.0") == 0) {
    *device = &first_gpu;
  } else if (std::strcmp(bus, "0000:41:00.0") == 0) {
    *device = &second_gpu;
  } else {
    return 6;
  }
  return 0;
}

int nvmlDeviceGetClockInfo(void* device, int type, unsigned* mhz) {
  static std::atomic<unsigned> reads{0};
  if (device == nullptr || type != 1) return 2;  // only NVML_CLOCK_SM (1) is asked for
  *mhz = device == &second_gpu ? 1200 : 1400 + 100 * (reads++ % 3);
  return 0;
}

int nvmlDeviceGetPowerUsage(void* device, unsigned* milliwatts) {
  if (device == nullptr) return 2;
  *milliwatts = device == &second_gpu ? 300000 : 650000;
  return 0;
}

const char* nvmlErrorString(int code) { return code == 6 ? "Not Found" : "Invalid Argument"; }

}  // extern "C"
