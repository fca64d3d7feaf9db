// CheckKvCacheFits decides, before anything is allocated, whether --kv-cache-memory fits in what
// the host or the GPU reports free (serve calls it with MemAvailable or cudaMemGetInfo's free).
#include <gtest/gtest.h>

#include <string>

#include "core/memory_check.h"

namespace uniprefill {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(MemoryCheckTest, ASizeWithinWhatIsFreeFits) {
  EXPECT_TRUE(CheckKvCacheFits(4 * kGiB, 8 * kGiB, "GPU 0").ok());
  EXPECT_TRUE(CheckKvCacheFits(8 * kGiB, 8 * kGiB, "GPU 0").ok());  // exactly all of it
}

TEST(MemoryCheckTest, UnknownAvailableMemoryIsNotARefusal) {
  EXPECT_TRUE(CheckKvCacheFits(int64_t{99999} << 40, 0, "GPU 0").ok());
  EXPECT_TRUE(CheckKvCacheFits(int64_t{99999} << 40, -1, "this machine").ok());
}

TEST(MemoryCheckTest, MoreThanIsFreeNamesTheFlagBothSizesAndAFittingSize) {
  const Status st = CheckKvCacheFits(200 * kGiB, int64_t(139.5 * kGiB), "GPU 0");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(st.message(),
            "--kv-cache-memory 200.00 GiB is more than GPU 0 has available (139.50 GiB); give "
            "less, e.g. --kv-cache-memory 69GiB");
}

TEST(MemoryCheckTest, ASmallDeviceSuggestsMebibytes) {
  const Status st = CheckKvCacheFits(kGiB, 1536 << 20 >> 1, "this machine");  // 768 MiB free
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("this machine has available (0.75 GiB)"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("--kv-cache-memory 384MiB"), std::string::npos) << st.message();
}

TEST(MemoryCheckTest, TebibyteRequestsAreWrittenInTiB) {
  const Status st = CheckKvCacheFits(int64_t{99999} << 40, 22 * kGiB, "this machine");
  EXPECT_NE(st.message().find("--kv-cache-memory 99999.00 TiB is more than this machine has "
                              "available (22.00 GiB); give less, e.g. --kv-cache-memory 11GiB"),
            std::string::npos)
      << st.message();
}

TEST(MemoryCheckTest, OneByteOverIsRefused) {
  EXPECT_FALSE(CheckKvCacheFits(8 * kGiB + 1, 8 * kGiB, "GPU 0").ok());
}

TEST(MemoryCheckTest, CudaMemoryInfoFailsCleanlyWithoutAGpu) {
  // Without the CUDA backend or a GPU it is an error, never a crash; with one, free <= total.
  Result<DeviceMemoryInfo> info = CudaMemoryInfo(0);
  if (info.ok()) {
    EXPECT_GT(info->total_bytes, 0);
    EXPECT_LE(info->free_bytes, info->total_bytes);
  } else {
    EXPECT_FALSE(info.status().message().empty());
  }
  EXPECT_FALSE(CudaMemoryInfo(-1).ok());
}

}  // namespace
}  // namespace uniprefill
