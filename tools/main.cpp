// The `zest` command-line tool: one binary, one subcommand per file in tools/ (cmd_*.cpp).
#include "tools/commands.h"
#include "tools/error_report.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace {

// What a command printed must have reached its destination: a full disk behind `> file` is an error
// (a reader that went away, EPIPE, is not: `zest ... | head` is fine).
int check_stdout(int code) {
  std::cout.flush();
  if (std::fflush(stdout) == 0 && !std::ferror(stdout) && std::cout.good()) return code;
  if (errno == EPIPE) return code;
  std::cerr << "zest: error: cannot write the output (stdout): " << std::strerror(errno) << "\n";
  return code == 0 ? 1 : code;
}

}  // namespace

int main(int argc, char** argv) {
  zest::install_error_reporting();
  // Past a file-size limit a write then fails with EFBIG, reported like any write error, instead of
  // the process being killed without a word.
  std::signal(SIGXFSZ, SIG_IGN);
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
  zest::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // zest::Error, LibTorch's c10::Error (without its C++ trace) and allocation failures alike: one line.
    std::cerr << "zest: error: " << zest::describe_error(e) << "\n";
    return 1;
  }
  return check_stdout(zest::cli::exit_code());
}
