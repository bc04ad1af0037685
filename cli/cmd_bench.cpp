// `zest bench CONFIG.toml [--set ...] --steps N --warmup W [--length L] [--text-tokens T] [--profile DIR]`.
#include "cli/commands.h"

#include "comm/world.h"
#include "train/bench.h"
#include "train/run_config.h"

#include <CLI/CLI.hpp>

#include <cstdio>

namespace zest::cli {

void add_bench_command(CLI::App& app) {
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    BenchOptions options;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time the configured model and engine on synthetic batches; one JSON line from rank 0");
  cmd->add_option("config", args->config, "run file (configs/*.toml, bench/configs/*.toml)")->required();
  cmd->add_option("--set", args->overrides, "override a key: section.key=value (TOML value)");
  cmd->add_option("--steps", args->options.steps, "timed steps")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", args->options.warmup, "untimed steps first (with CUDA graphs, more until every batch's shape is captured)")->capture_default_str()->check(
      CLI::Range(0, 100000));
  cmd->add_option("--length", args->options.shapes.length,
                  "motion frames / latent side (default: data.seq_len, else 360 / 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--text-tokens", args->options.shapes.text_tokens, "text tokens (default 128 / 77)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--profile", args->options.profile_dir,
                  "after the timed steps, trace more steps: a Chrome trace per rank in this folder (TensorBoard's profile tab, "
                  "Perfetto), on GPUs with kernels and per-rank kernel tables");
  cmd->add_option("--profile-steps", args->options.profile_steps, "steps under the profiler")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_option("--peak-tflops", args->options.peak_tflops, "MFU denominator")->capture_default_str();
  cmd->add_flag("--loss-curve", args->options.loss_curve,
                "every step's loss in the JSON line (\"loss_curve\", rank 0's last micro-batch; the synthetic "
                "batches and noise follow [train] seed)");
  cmd->callback([args] {
    WorldGuard world;
    try {
      const RunConfig config = parse_run_config(args->config, args->overrides);
      const nlohmann::json result = run_bench(config, args->options);
      if (world.rank() == 0) {
        std::printf("%s\n", result.dump().c_str());
        std::fflush(stdout);
      }
    } catch (const std::exception& e) {
      abort_world(e.what());
    }
  });
}

}  // namespace zest::cli
