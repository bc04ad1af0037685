// The `zest` command-line tool: one binary, one subcommand per file in cli/ (cmd_*.cpp).
#include "cli/commands.h"
#include "comm/launch_env.h"
#include "core/check.h"
#include "train/error_report.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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

// The CUDA caching allocator maps growable segments instead of fixed ones unless the user chose otherwise
// (PYTORCH_CUDA_ALLOC_CONF set, even empty): a step's gradients are allocated in backward and released
// after the update, and with fixed segments the next forward's activations split their blocks, so the
// cache held 22 GiB above the peak allocation on SDXL at 8 latents (92.8 vs 71.1 GiB) and 8 GiB on
// HY-Motion at 8 sequences; with growable ones 9.7 and 5.0 GiB, at the same step time (bench/RESULTS.md).
// It must be set before the allocator's first use; child processes of `zest launch` inherit it.
void default_cuda_allocator_settings() {
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
}

}  // namespace

int main(int argc, char** argv) {
  default_cuda_allocator_settings();
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
  zest::cli::add_sample_command(app);
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    // torch.distributed.launch without --use_env: `zest --local_rank=N train ...`.
    if (const auto local_rank = zest::take_local_rank_argument(args)) {
      const char* env = std::getenv("LOCAL_RANK");
      if (env != nullptr && *env != '\0' && std::string(env) != std::to_string(*local_rank))
        throw zest::Error("command line: --local_rank=" + std::to_string(*local_rank) + " contradicts LOCAL_RANK=" + env);
      ::setenv("LOCAL_RANK", std::to_string(*local_rank).c_str(), 1);
    }
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments in reverse order
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // zest::Error, LibTorch's c10::Error (without its C++ trace) and allocation failures alike: one line.
    std::cerr << "zest: error: " << zest::describe_error(e) << "\n";
    return 1;
  }
  return check_stdout(zest::cli::exit_code());
}
