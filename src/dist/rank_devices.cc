#include "dist/rank_devices.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

namespace uniprefill::dist {
namespace {

// A non-negative integer environment variable, or `fallback` when unset or malformed.
int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (*end != '\0' || x < 0) ? fallback : static_cast<int>(x);
}

}  // namespace

int RankCudaDevice(int world_rank) { return EnvInt("OMPI_COMM_WORLD_LOCAL_RANK", world_rank); }

std::vector<int> HostCudaDevices(int world_size) {
  const int local =
      world_size > 1 ? std::max(1, EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE", world_size)) : 1;
  std::vector<int> devices(local);
  std::iota(devices.begin(), devices.end(), 0);
  return devices;
}

}  // namespace uniprefill::dist
