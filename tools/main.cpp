// The `zest` command-line tool: one binary, one subcommand per file in tools/ (cmd_*.cpp).
#include "tools/commands.h"
#include "tools/error_report.h"

#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
  zest::install_error_reporting();
  CLI::App app{"zest: ZeRO-style memory-sharding training engine"};
  app.require_subcommand(1);
  zest::cli::add_train_command(app);
  zest::cli::add_estimate_command(app);
  zest::cli::add_config_command(app);
  zest::cli::add_models_command(app);
  zest::cli::add_merge_command(app);
  zest::cli::add_ckpt_command(app);
  zest::cli::add_launch_command(app);
  zest::cli::add_data_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // zest::Error, LibTorch's c10::Error (without its C++ trace) and allocation failures alike: one line.
    std::cerr << "zest: error: " << zest::describe_error(e) << "\n";
    return 1;
  }
  return zest::cli::exit_code();
}
