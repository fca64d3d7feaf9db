#include "core/status.h"

#include <gtest/gtest.h>

namespace uniprefill {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd value " + std::to_string(x));
  return x / 2;
}

Status Chain(int x, int* out) {
  UP_ASSIGN_OR_RETURN(int h, Half(x));
  UP_ASSIGN_OR_RETURN(*out, Half(h));
  return OkStatus();
}

TEST(StatusTest, OkByDefault) { EXPECT_TRUE(Status().ok()); }

TEST(StatusTest, ResultCarriesValueOrError) {
  EXPECT_EQ(Half(4).value(), 2);
  EXPECT_FALSE(Half(3).ok());
  EXPECT_EQ(Half(3).status().message(), "odd value 3");
  EXPECT_EQ(Half(3).status().code(), ErrorCode::kInvalidArgument);
}

TEST(StatusTest, AssignOrReturnPropagatesFirstError) {
  int out = 0;
  EXPECT_TRUE(Chain(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(Chain(6, &out).message(), "odd value 3");
}

}  // namespace
}  // namespace uniprefill
