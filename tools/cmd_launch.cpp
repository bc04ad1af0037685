// `zest launch -n N [--] CMD ARGS...`: runs N ranks of a command on this machine with a torchrun-style
// environment (the process logic is tools/launcher.cpp); the exit status is the launcher's result.
#include "tools/commands.h"
#include "tools/launcher.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace zest::cli {
namespace {

constexpr double kMaxRanks = 1024;     // ranks of one machine; each is a whole process
constexpr double kMaxGraceS = 3600;

// CLI11's range validators print their bounds as floats ("Value 0 not in range 0.000000 to 1.79e308"):
// this one says what the option is and what it takes.
CLI::Validator number_between(double low, double high, const std::string& what, bool whole) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0.0;
        size_t used = 0;
        try {
          value = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        const bool ok = used == text.size() && value >= low && value <= high && (!whole || value == std::floor(value));
        if (ok) return "";
        char range[96];
        std::snprintf(range, sizeof(range), "%s between %g and %g", whole ? "a whole number" : "a number", low, high);
        return "must be " + std::string(range) + " (" + what + "), got '" + text + "'";
      },
      "", "");
}

}  // namespace

void add_launch_command(CLI::App& app) {
  CLI::App* launch = app.add_subcommand(
      "launch", "Run N ranks of a command on this machine (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, "
                "MASTER_PORT set for each); e.g. zest launch -n 2 zest train run.toml");
  auto options = std::make_shared<LaunchOptions>();  // outlives this function: the callback runs later
  auto grace_s = std::make_shared<double>(5.0);
  launch->add_option("-n,--nproc", options->nprocs, "number of ranks")
      ->required()
      ->check(number_between(1, kMaxRanks, "ranks to start on this machine", true));
  launch->add_option("--master-addr", options->master_addr, "address of rank 0's rendezvous store")
      ->capture_default_str();
  launch->add_option("--master-port", options->master_port, "rendezvous port (default: a free port)")
      ->check(number_between(0, 65535, "a TCP port; 0 = a free one", true));
  launch->add_option("--grace", *grace_s, "seconds between SIGTERM and SIGKILL when a rank failed")
      ->capture_default_str()
      ->check(number_between(0, kMaxGraceS, "seconds", false));
  launch->add_option("command", options->command, "the command of every rank and its arguments")->required();
  // Everything from the first positional (or after "--") on is the command, its own options included:
  // positionals_at_end stops option parsing there; prefix_command tolerates the "--" CLI11 keeps aside.
  launch->positionals_at_end();
  launch->prefix_command();
  launch->callback([options, grace_s] {
    options->grace = std::chrono::milliseconds(static_cast<int64_t>(*grace_s * 1000.0));
    exit_code() = run_ranks(*options);
  });
}

}  // namespace zest::cli
