// `zest train CONFIG.toml [--set section.key=value ...] [--no-resume]`.
#include "cli/commands.h"

#include "comm/world.h"
#include "train/error_report.h"
#include "train/run_config.h"
#include "train/trainer.h"

#include <CLI/CLI.hpp>

namespace zest::cli {

void add_train_command(CLI::App& app) {
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    bool no_resume = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("train", "Train from a TOML run file (under mpirun, zest launch, or alone)");
  cmd->add_option("config", args->config, "run file (configs/*.toml)")->required();
  cmd->add_option("--set", args->overrides, "override a key: section.key=value (TOML value)");
  cmd->add_flag("--no-resume", args->no_resume, "start fresh; refused when <checkpoint.dir> already holds checkpoints");
  cmd->callback([args] {
    WorldGuard world;
    try {
      const RunConfig config = parse_run_config(args->config, args->overrides);
      TrainOptions options;
      options.resume = !args->no_resume;
      run_training(config, options);
    } catch (const std::exception& e) {
      // Under mpirun, end every rank now rather than leave them waiting in a collective.
      abort_world(describe_error(e));
    }
  });
}

}  // namespace zest::cli
