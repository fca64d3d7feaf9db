#include "core/memory_check.h"

#include <unistd.h>

#include <cstdio>

namespace uniprefill {

int64_t HostAvailableBytes() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kib = -1;
    while (std::fgets(line, sizeof(line), f)) {
      if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    }
    std::fclose(f);
    if (kib > 0) return static_cast<int64_t>(kib) * 1024;
  }
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

std::string FormatGib(int64_t bytes) {
  char buf[40];
  if (bytes >= int64_t{1} << 40) {
    std::snprintf(buf, sizeof(buf), "%.2f TiB", double(bytes) / double(int64_t{1} << 40));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", double(bytes) / double(int64_t{1} << 30));
  }
  return buf;
}

Status CheckKvCacheFits(int64_t requested, int64_t available, const std::string& where) {
  if (available <= 0 || requested <= available) return OkStatus();
  // Suggest half of what is free (whole GiB when there is one): the weights need room too.
  const int64_t half_gib = available / 2 >> 30;
  const std::string fits =
      half_gib > 0 ? std::to_string(half_gib) + "GiB" : std::to_string(available / 2 >> 20) + "MiB";
  return ResourceExhausted("--kv-cache-memory " + FormatGib(requested) + " is more than " + where +
                           " has available (" + FormatGib(available) + "); give less, e.g. " +
                           "--kv-cache-memory " + fits);
}

#ifndef UNIPREFILL_WITH_CUDA
// The real one: core/cuda/cuda_memory_info.cc.
Result<DeviceMemoryInfo> CudaMemoryInfo(int) {
  return Unimplemented(
      "this uniprefill was built without the CUDA backend; rebuild with "
      "`bash scripts/build.sh -DUNIPREFILL_CUDA=ON` on a machine with nvcc, or use --device cpu");
}
Result<std::string> CudaPciBusId(int device_index) {
  return CudaMemoryInfo(device_index).status();
}
#endif

}  // namespace uniprefill
