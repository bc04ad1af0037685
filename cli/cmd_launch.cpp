// `zest launch [--nnodes N --node-rank R --master-addr A [--master-port P]] -n K [--] CMD ARGS...`: runs
// this node's K ranks of a command with a torchrun-style environment, as torchrun does on each node
// (the process logic is launch/launcher.cpp); or `zest launch -H node1:4,node2:4 -- CMD` (--hostfile),
// which starts that on every node, over ssh for the others. The exit status is the launcher's result.
#include "cli/commands.h"
#include "core/number_text.h"
#include "launch/launcher.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace zest::cli {
namespace {

constexpr double kMaxRanks = 1024;     // ranks of one machine; each is a whole process
constexpr double kMaxNodes = 65536;
constexpr double kMaxGraceS = 3600;

// CLI11's range validators print their bounds as floats ("Value 0 not in range 0.000000 to 1.79e308"):
// this one says what the option is and what it takes.
CLI::Validator number_between(double low, double high, const std::string& what, bool whole) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const std::optional<double> value = number_in(text);
        const bool ok = value && *value >= low && *value <= high && (!whole || *value == std::floor(*value));
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
                "MASTER_PORT set for each); e.g. zest launch -n 2 zest train run.toml; on each of several machines: "
                "zest launch --nnodes 2 --node-rank R --master-addr node1 -n 4 -- zest train run.toml");
  auto options = std::make_shared<LaunchOptions>();  // outlives this function: the callback runs later
  auto grace_s = std::make_shared<double>(5.0);
  auto host_list = std::make_shared<std::string>();
  auto hostfile = std::make_shared<std::string>();
  auto rsh = std::make_shared<std::string>("ssh -tt -o BatchMode=yes");
  CLI::Option* nproc = launch->add_option("-n,--nproc", options->nprocs, "number of ranks on this machine")
                           ->check(number_between(1, kMaxRanks, "ranks to start on this machine", true));
  CLI::Option* hosts = launch->add_option("-H,--hosts", *host_list,
                                          "node1:4,node2:4: start each node's ranks (the others' over --rsh)");
  CLI::Option* file = launch->add_option("--hostfile", *hostfile, "lines 'node1 slots=4' (or node1:4), as for mpirun");
  hosts->excludes(file);
  launch->add_option("--rsh", *rsh, "how to run a command on another node (as RSH HOST COMMAND)")->capture_default_str();
  launch->add_option("--node-label", options->node_label, "prefix output lines [LABEL:rank R] (set by -H)");
  launch->add_option("--nnodes", options->nnodes, "machines taking part, each started with the same -n")
      ->capture_default_str()
      ->check(number_between(1, kMaxNodes, "machines", true));
  launch->add_option("--node-rank", options->node_rank, "this machine's index, 0 .. nnodes-1 (0 holds rank 0)")
      ->capture_default_str()
      ->check(number_between(0, kMaxNodes - 1, "this machine's index", true));
  launch->add_option("--master-addr", options->master_addr, "address of rank 0's rendezvous store (node 0's host)")
      ->capture_default_str();
  launch->add_option("--master-port", options->master_port,
                     "rendezvous port (default: a free port; 29500 with several nodes)")
      ->check(number_between(0, 65535, "a TCP port; 0 = a free one", true));
  launch->add_option("--grace", *grace_s, "seconds between SIGTERM and SIGKILL when a rank failed")
      ->capture_default_str()
      ->check(number_between(0, kMaxGraceS, "seconds", false));
  launch->add_option("command", options->command, "the command of every rank and its arguments")->required();
  // Everything from the first positional (or after "--") on is the command, its own options included:
  // positionals_at_end stops option parsing there; prefix_command tolerates the "--" CLI11 keeps aside.
  launch->positionals_at_end();
  launch->prefix_command();
  launch->callback([options, grace_s, host_list, hostfile, rsh, nproc, hosts, file] {
    const bool by_hosts = hosts->count() > 0 || file->count() > 0;
    if (by_hosts && nproc->count() > 0)
      throw CLI::ValidationError("-n", "is taken from the slots of -H/--hostfile; give one or the other");
    if (!by_hosts && nproc->count() == 0) throw CLI::RequiredError("-n,--nproc (or -H/--hostfile)");
    if (by_hosts) {
      options->hosts = hosts->count() > 0 ? parse_host_list(*host_list) : read_hostfile(*hostfile);
      options->rsh.clear();
      std::istringstream words(*rsh);
      for (std::string w; words >> w;) options->rsh.push_back(w);
      if (options->rsh.empty()) throw CLI::ValidationError("--rsh", "must name a command");
    }
    if (options->node_rank >= options->nnodes)
      throw CLI::ValidationError("--node-rank", "must be below --nnodes (" + std::to_string(options->nnodes) +
                                                    "), got " + std::to_string(options->node_rank));
    options->grace = std::chrono::milliseconds(static_cast<int64_t>(*grace_s * 1000.0));
    exit_code() = run_ranks(*options);
  });
}

}  // namespace zest::cli
