// `zest config check FILE [--set section.key=value ...]`: validates a run file with the overrides
// applied and prints the resolved config with every default; any error is thrown (main prints it and
// exits non-zero).
#include "cli/commands.h"
#include "train/run_config.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace zest::cli {

namespace {

struct ConfigCheckOptions {
  std::string file;
  std::vector<std::string> overrides;
};

}  // namespace

void add_config_command(CLI::App& app) {
  CLI::App* config = app.add_subcommand("config", "Check run configuration files");
  config->require_subcommand(1);
  CLI::App* check = config->add_subcommand(
      "check", "Validate a run file (with --set overrides) and print the resolved config with every default");
  auto options = std::make_shared<ConfigCheckOptions>();  // outlives this function: the callback runs later
  check->add_option("file", options->file, "run configuration file (TOML)")->required();
  // One value per --set, so that a following positional FILE is never taken as a second override.
  check->add_option("--set", options->overrides, "override section.key=value (a TOML value); repeatable")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  check->callback([options] {
    const RunConfig config = parse_run_config(options->file, options->overrides);
    check_run_model(config);  // what train refuses about the model, refused here too
    std::cout << to_toml(config);
  });
}

}  // namespace zest::cli
