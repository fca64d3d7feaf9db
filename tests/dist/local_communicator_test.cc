// The world-of-one communicator (dist/communicator.h): TP=1 runs the sharded code path through it,
// so every collective must leave a single rank's data exactly as a lone rank would have it. The
// MPI transport is tested under mpirun (tests/mpi/).
#include <gtest/gtest.h>

#include <vector>

#include "dist/communicator.h"

namespace uniprefill::dist {
namespace {

TEST(LocalCommunicatorTest, CollectivesOfOneRankKeepOrCopyTheData) {
  std::unique_ptr<Communicator> c = MakeLocalCommunicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->world_size(), 1);
  std::vector<float> x = {1.5f, -2.0f, 3.0f};
  ASSERT_TRUE(c->AllReduce(x.data(), 3, ReduceOp::kSum).ok());
  ASSERT_TRUE(c->AllReduce(x.data(), 3, ReduceOp::kMax).ok());
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  std::vector<float> y(3, 0.0f);
  ASSERT_TRUE(c->AllGather(x.data(), y.data(), 12).ok());
  EXPECT_EQ(y, x);
  ASSERT_TRUE(c->Broadcast(x.data(), 12, 0).ok());
  EXPECT_TRUE(c->Barrier().ok());
  EXPECT_FALSE(c->Broadcast(x.data(), 12, 1).ok()) << "root 1 does not exist in a world of 1";
  EXPECT_FALSE(c->AllReduce(x.data(), -1, ReduceOp::kSum).ok());
}

}  // namespace
}  // namespace uniprefill::dist
