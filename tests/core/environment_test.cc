// EnvironmentWithPrefix: the variables of one prefix, with their values, and no others.
#include "core/environment.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace uniprefill {
namespace {

TEST(EnvironmentTest, OnlyThePrefixsVariablesWithTheirValues) {
  setenv("UPENVTEST_A", "overlap", 1);
  setenv("UPENVTEST_B", "", 1);
  setenv("UPENVTESX_C", "1", 1);
  const std::map<std::string, std::string> got = EnvironmentWithPrefix("UPENVTEST_");
  EXPECT_EQ(got,
            (std::map<std::string, std::string>{{"UPENVTEST_A", "overlap"}, {"UPENVTEST_B", ""}}));
  EXPECT_TRUE(EnvironmentWithPrefix("UPENVTEST_NONE").empty());
  unsetenv("UPENVTEST_A");
  unsetenv("UPENVTEST_B");
  unsetenv("UPENVTESX_C");
}

}  // namespace
}  // namespace uniprefill
