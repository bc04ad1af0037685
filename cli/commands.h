// The subcommands of the `zest` CLI: each add_*_command registers one subcommand (defined in
// cli/cmd_*.cpp): it parses the arguments and hands the work to the room that does it (train/, launch/,
// pipelines/, data/, checkpoint/, models/), then sets the exit code.
#pragma once

namespace CLI {
class App;
}

namespace zest::cli {

void add_train_command(CLI::App& app);     // zest train         (cmd_train.cpp)
void add_estimate_command(CLI::App& app);  // zest estimate      (cmd_estimate.cpp)
void add_config_command(CLI::App& app);    // zest config check  (cmd_config.cpp)
void add_models_command(CLI::App& app);    // zest models list|parity (cmd_models.cpp)
void add_merge_command(CLI::App& app);     // zest merge         (cmd_merge.cpp)
void add_ckpt_command(CLI::App& app);      // zest ckpt inspect  (cmd_ckpt.cpp)
void add_launch_command(CLI::App& app);    // zest launch        (cmd_launch.cpp)
void add_data_command(CLI::App& app);      // zest data synth|stats (cmd_data.cpp)
void add_bench_command(CLI::App& app);     // zest bench         (cmd_bench.cpp)
void add_sample_command(CLI::App& app);    // zest sample        (cmd_sample.cpp)

// Exit status set by a subcommand's callback (0 unless it failed without throwing).
int& exit_code();

}  // namespace zest::cli
