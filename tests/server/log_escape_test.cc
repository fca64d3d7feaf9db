// EscapeForLog (server/log_escape.h): what a client sends can never end a log line or forge the
// next one, and the escaping is readable and bounded.
#include "server/log_escape.h"

#include <gtest/gtest.h>

#include <string>

namespace uniprefill::server {
namespace {

TEST(LogEscapeTest, ControlBytesBackslashesAndHighBytesBecomeCEscapes) {
  EXPECT_EQ(EscapeForLog("/v1/models"), "/v1/models");
  EXPECT_EQ(EscapeForLog("/a\nserve: GET /forged 200"), "/a\\nserve: GET /forged 200");
  EXPECT_EQ(EscapeForLog("x\r\ty\\z"), "x\\r\\ty\\\\z");
  EXPECT_EQ(EscapeForLog(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(EscapeForLog("\x7f\xc3\xa9"), "\\x7f\\xc3\\xa9");
  for (int c = 0; c < 256; ++c) {
    const std::string out = EscapeForLog(std::string(1, static_cast<char>(c)));
    EXPECT_EQ(out.find('\n'), std::string::npos) << c;
    EXPECT_EQ(out.find('\r'), std::string::npos) << c;
  }
}

TEST(LogEscapeTest, LongInputIsCutAndMarked) {
  const std::string out = EscapeForLog(std::string(1000, 'a'), 10);
  EXPECT_EQ(out, std::string(10, 'a') + "...");
  EXPECT_EQ(EscapeForLog(std::string(10, 'a'), 10), std::string(10, 'a'));
}

}  // namespace
}  // namespace uniprefill::server
