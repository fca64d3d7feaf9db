// DropMappedPages (model/model_definition.h): a loaded definition knows its memory-mapped files,
// and giving their pages back shrinks the process's resident set (read from /proc/self/smaps)
// without changing a byte of any weight that points into them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "model/hf_checkpoint.h"
#include "model/model_definition.h"

namespace uniprefill {
namespace {

// Resident KiB of the mapping that starts at `base` (its smaps entry), or -1 if none starts there.
int64_t ResidentKib(const void* base) {
  std::ifstream smaps("/proc/self/smaps");
  const auto want = reinterpret_cast<uintptr_t>(base);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {  // a mapping's first line
      inside = begin == want;
      continue;
    }
    if (inside && line.rfind("Rss:", 0) == 0) {
      std::istringstream in(line.substr(4));
      int64_t kib = -1;
      in >> kib;
      return kib;
    }
  }
  return -1;
}

// A checksum of every stored byte the definition's linear weights point at.
uint64_t WeightChecksum(const ModelDefinition& d) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto add = [&](const ops::LinearWeight& w) {
    for (const TensorView& p : w.parts) {
      const auto* b = static_cast<const uint8_t*>(p.data);
      const int64_t n = DTypeBytes(p.dtype, p.numel());
      for (int64_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    }
  };
  add(d.token_embedding);
  add(d.head);
  for (const LayerDefinition& L : d.layers) {
    for (const ops::LinearWeight* w : L.LinearWeights()) add(*w);
  }
  return h;
}

TEST(MappedPagesTest, DroppingAMappedCheckpointShrinksTheResidentSetAndKeepsEveryWeight) {
  auto ctx = DeviceContext::Cpu(1);
  LoadOptions lo;
  lo.f32_prefill_weights = false;  // the weights stay views into the mapping
  auto d = LoadHfDefinition(std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/llama", *ctx, lo);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->mapped_files.size(), 1u) << "one model.safetensors, memory-mapped";
  const std::span<const uint8_t> file = d->mapped_files[0];
  ASSERT_GT(file.size(), size_t{256} << 10);

  const uint64_t before = WeightChecksum(*d);  // touches every weight page
  const int64_t touched = ResidentKib(file.data());
  ASSERT_GE(touched, 0) << "no smaps entry for the mapping";
  EXPECT_GT(touched, static_cast<int64_t>(file.size() / 1024 / 2)) << "the checksum read the file";

  DropMappedPages(*d);
  const int64_t dropped = ResidentKib(file.data());
  EXPECT_LE(dropped, 8) << "resident KiB after DropMappedPages (was " << touched << ")";

  // The pages come back from the page cache, unchanged.
  EXPECT_EQ(WeightChecksum(*d), before);
  EXPECT_GT(ResidentKib(file.data()), dropped);
}

}  // namespace
}  // namespace uniprefill
