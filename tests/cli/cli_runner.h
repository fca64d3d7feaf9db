// Runs the `uniprefill` binary as a user would (a shell command line) and captures its output:
// the helpers shared by the CLI tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "testing/tiny_gemma3.h"

namespace uniprefill {

struct CliResult {
  int exit_code = -1;
  bool crashed = false;
  std::string out, err;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string CliPath() {
  const char* env = std::getenv("UP_CLI");
  return env ? env : std::string(UP_BINARY_DIR) + "/uniprefill";
}

// `env` prefixes the command line (e.g. "env -u VAR" or "VAR=value"); empty for none.
inline CliResult RunCliWithEnv(const std::string& env, const std::string& args) {
  const std::string out = testing::TempPath("cli_out.txt");
  const std::string err = testing::TempPath("cli_err.txt");
  const std::string cmd =
      env + " " + CliPath() + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.crashed = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) >= 128);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(out);
  r.err = ReadAll(err);
  return r;
}

inline CliResult RunCli(const std::string& args) { return RunCliWithEnv("", args); }

inline int CountErrorLines(const std::string& err) {
  int n = 0;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) n += line.rfind("error:", 0) == 0;
  return n;
}

// One `error:` line mentioning `needle`, a non-zero exit and no crash.
inline void ExpectCleanError(const std::string& args, const std::string& needle) {
  SCOPED_TRACE("uniprefill " + args);
  CliResult r = RunCli(args);
  EXPECT_FALSE(r.crashed) << r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(CountErrorLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr was: " << r.err;
}

}  // namespace uniprefill
