// dist::RankCudaDevice / HostCudaDevices: the engine opens the device of a rank's host-local rank
// and serve reports the clocks of every device the job's ranks drive on its host, by one rule.
#include "dist/rank_devices.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace uniprefill::dist {
namespace {

// Sets Open MPI's local rank and size for one test, and unsets them after.
class RankDevicesTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  }
};

TEST_F(RankDevicesTest, ARankDrivesItsHostLocalRanksDevice) {
  EXPECT_EQ(RankCudaDevice(0), 0);
  EXPECT_EQ(RankCudaDevice(3), 3);  // another launcher: all ranks on one host
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  EXPECT_EQ(RankCudaDevice(5), 1);  // world rank 5 is the second rank of its host
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);
  EXPECT_EQ(RankCudaDevice(2), 2) << "a malformed local rank falls back to the world rank";
}

TEST_F(RankDevicesTest, TheHostsDevicesAreThoseOfItsRanks) {
  EXPECT_EQ(HostCudaDevices(1), std::vector<int>{0});
  EXPECT_EQ(HostCudaDevices(4), (std::vector<int>{0, 1, 2, 3}));
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);  // 4 ranks over two hosts of 2
  EXPECT_EQ(HostCudaDevices(4), (std::vector<int>{0, 1}));
  EXPECT_EQ(HostCudaDevices(1), std::vector<int>{0}) << "no tensor parallelism: GPU 0 alone";
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "0", 1);
  EXPECT_EQ(HostCudaDevices(4), std::vector<int>{0});
}

}  // namespace
}  // namespace uniprefill::dist
