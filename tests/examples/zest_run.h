// Helpers for tests that run the built `zest` binary as a user would: a shell command in a given
// folder with its combined output and exit status, and the losses a run logged to metrics.jsonl.
#pragma once

#include "common/zest_binary.h"

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace zest::testing {

struct CommandResult {
  int status = -1;     // exit code; -1 when killed by a signal
  std::string output;  // stdout and stderr
};

// Runs `command` through the shell inside `dir`.
inline CommandResult run_in(const std::filesystem::path& dir, const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen(("cd '" + dir.string() + "' && " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  while (const size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// One metrics.jsonl line per logged step.
struct LoggedStep {
  int64_t step = 0;
  double loss = 0.0;
  int64_t skipped_total = 0;
};

inline std::vector<LoggedStep> logged_steps(const std::filesystem::path& metrics) {
  std::vector<LoggedStep> steps;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    steps.push_back({record.at("step").get<int64_t>(), record.at("loss").get<double>(),
                     record.at("skipped_total").get<int64_t>()});
  }
  return steps;
}

}  // namespace zest::testing
