// Running the built `zest` binary from a test: its exit status and everything it printed (sent to a log file).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace zest::testing {

struct ZestRun {
  int status = -1;     // the exit status; -1 when zest did not exit normally
  std::string output;  // stdout and stderr together
};

// `zest ARGS > LOG 2>&1` with the build's binary (ZEST_BINARY_DIR).
inline ZestRun run_zest(const std::string& args, const std::string& log) {
  const int rc = std::system((std::string(ZEST_BINARY_DIR) + "/zest " + args + " > " + log + " 2>&1").c_str());
  ZestRun ran;
  ran.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  std::ifstream in(log);
  ran.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return ran;
}

}  // namespace zest::testing
