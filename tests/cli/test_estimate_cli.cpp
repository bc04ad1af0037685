// `zest estimate`: the ZeRO paper's figures from the built binary, and its argument errors.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::pair<int, std::string> run(const std::string& args, const std::string& subcommand = "estimate") {
  const std::string command = std::string(ZEST_BINARY_DIR) + "/zest " + subcommand + " " + args + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buffer{};
  while (pipe && std::fgets(buffer.data(), buffer.size(), pipe)) out += buffer.data();
  const int status = pipe ? ::pclose(pipe) : -1;
  return {WEXITSTATUS(status), out};
}

TEST(EstimateCli, ZeroPaperTable) {
  const auto [status, out] = run("--params 7500000000 --world 64");
  ASSERT_EQ(status, 0) << out;
  // stage: params, grads, master, optimizer, total GB (7.5B, 64 ranks, mixed-precision Adam).
  EXPECT_NE(out.find("120.000"), std::string::npos) << out;  // stage 0
  EXPECT_NE(out.find("31.406"), std::string::npos) << out;   // stage 1
  EXPECT_NE(out.find("16.641"), std::string::npos) << out;   // stage 2
  // Stage 3 keeps no 16-bit parameters at rest (gathers cast the master): 14P/N, not the paper's 16P/N (1.875).
  EXPECT_NE(out.find("0.000        0.234        0.469        0.938        0.000        1.641"), std::string::npos) << out;
}

// Offload columns (stages 1-3): on the GPU only parameters and gradients; in host memory the master,
// Adam's state and the staging ring. 7.5B on 64 ranks, bf16: stage 2 keeps 2P + 2P/N = 15.234 GB on the
// GPU, stage 3 4P/N = 0.469 GB; the host holds 12P/N = 1.406 GB + the 256 MiB ring = 1.675 GB.
TEST(EstimateCli, OffloadColumns) {
  const auto [status, out] = run("--params 7500000000 --world 64");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("offload: GPU GB"), std::string::npos) << out;
  EXPECT_NE(out.find("15.234            1.675"), std::string::npos) << out;
  EXPECT_NE(out.find("0.469            1.675"), std::string::npos) << out;
}

TEST(EstimateCli, FromARunFileAndBadArguments) {
  const auto [status, out] = run("--config " + std::string(ZEST_SOURCE_DIR) + "/configs/hymotion_tiny.toml --world 2");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("181,036 parameters"), std::string::npos) << out;
  const auto [bad_status, bad_out] = run("--params 100 --world 2 --precision fp8");
  EXPECT_NE(bad_status, 0);
  EXPECT_NE(bad_out.find("--precision must be bf16, fp16 or fp32"), std::string::npos) << bad_out;
}

// The header names the run file's optimizer, as its numbers use it (it printed --optimizer's default): a
// run file with SGD (no state) against --optimizer adamw on the command line.
TEST(EstimateCli, TheHeaderNamesTheRunFilesOptimizer) {
  std::ifstream in(std::string(ZEST_SOURCE_DIR) + "/configs/hymotion_tiny.toml");
  std::stringstream text;
  text << in.rdbuf();
  std::string run_file = text.str();
  const std::string adamw = "name = \"adamw\"";
  ASSERT_NE(run_file.find(adamw), std::string::npos);
  run_file.replace(run_file.find(adamw), adamw.size(), "name = \"sgd\"");
  const size_t betas = run_file.find("betas");  // AdamW's own key: SGD refuses it
  if (betas != std::string::npos) run_file.erase(betas, run_file.find('\n', betas) - betas);
  const std::string path = ::testing::TempDir() + "estimate_sgd.toml";
  std::ofstream(path) << run_file;
  const auto [status, out] = run("--config " + path + " --world 2 --optimizer adamw");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("gradient shards, sgd"), std::string::npos) << out;
  EXPECT_EQ(out.find("adamw"), std::string::npos) << out;
}

// An EMA costs what the master costs: 4P at stage 0, 4P/N when sharded. 1e9 parameters on 8 ranks, bf16:
// stage 2 is 2P + 14P/N = 3.75 GB, 4.25 GB with the EMA's 0.5 GB.
TEST(EstimateCli, EmaAddsWhatTheMasterTakes) {
  const auto [status, out] = run("--params 1000000000 --world 8 --ema");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("ema GB"), std::string::npos) << out;
  EXPECT_NE(out.find("fp32 EMA"), std::string::npos) << out;
  EXPECT_NE(out.find("4.250"), std::string::npos) << out;  // stage 2 total
  const auto [plain_status, plain] = run("--params 1000000000 --world 8");
  EXPECT_NE(plain.find("3.750"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("4.250"), std::string::npos) << plain;

  // A run file's [ema] turns it on by itself, and `zest config check` prints the table.
  const std::string file = ::testing::TempDir() + "/ema_run.toml";
  std::ofstream(file) << "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"d\"\n[ema]\ndecay = 0.995\n";
  const auto [from_file_status, from_file] = run("--config " + file + " --world 2");
  EXPECT_EQ(from_file_status, 0) << from_file;
  EXPECT_NE(from_file.find("fp32 EMA"), std::string::npos) << from_file;
  const auto [check_status, checked] = run(file, "config check");
  EXPECT_EQ(check_status, 0) << checked;
  EXPECT_NE(checked.find("[ema]"), std::string::npos) << checked;
  EXPECT_NE(checked.find("decay = 0.995"), std::string::npos) << checked;
}

// The row of `stage` in the printed table: params, grads, master, optimizer, ema, total GB and total GiB.
std::vector<double> stage_row(const std::string& out, int stage) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string first;
    if (!(fields >> first) || first != std::to_string(stage)) continue;
    std::vector<double> row(7);
    for (double& value : row) fields >> value;
    if (fields) return row;
  }
  ADD_FAILURE() << "no row for stage " << stage << " in:\n" << out;
  return std::vector<double>(7, -1.0);
}

// A run file with [lora]: the adapters are what trains (their gradients, master and Adam state, sharded by the
// stage), the base is frozen (its bf16 copy whole on every rank, at every stage). SD1.5's UNet, rank 4 on the
// attention projections (diffusers' defaults), 4 ranks, bf16, fp32 gradient shards: P = 797,184 adapter parameters
// (r·(in + out) per projection over the 16 transformer blocks: the size of diffusers' SD1.5 LoRA files) and
// 859,520,964 frozen ones, 1.719 GB in bf16.
TEST(EstimateCli, LoraCountsTheAdaptersAsTrainedAndTheBaseAsFrozen) {
  const std::string plain = ::testing::TempDir() + "/sd15_run.toml", lora = ::testing::TempDir() + "/sd15_lora.toml";
  std::ofstream(plain) << "[model]\nname = \"unet_sd15\"\n[data]\ndir = \"d\"\n";
  std::ofstream(lora) << "[model]\nname = \"unet_sd15\"\n[data]\ndir = \"d\"\n[lora]\nrank = 4\n";
  const auto [plain_status, without] = run("--config " + plain + " --world 4");
  ASSERT_EQ(plain_status, 0) << without;
  const auto [lora_status, with] = run("--config " + lora + " --world 4");
  ASSERT_EQ(lora_status, 0) << with;
  EXPECT_NE(without.find("859,520,964 parameters"), std::string::npos) << without;
  EXPECT_EQ(without.find("frozen base"), std::string::npos) << without;
  EXPECT_NE(with.find("797,184 parameters"), std::string::npos) << with;
  EXPECT_NE(with.find("LoRA adapters"), std::string::npos) << with;
  EXPECT_NE(with.find("frozen base: 859,520,964 parameters, 1.719 GB in bf16"), std::string::npos) << with;

  enum Column { kParams, kGrads, kMaster, kOptimizer, kEma, kTotal };
  // Without [lora], the whole UNet trains: 18P at stage 0 (2P bf16 parameters, 4P fp32 gradients, 4P master,
  // 8P Adam) = 15.471 GB; 16P/N at stage 3 = 3.438 GB.
  EXPECT_NEAR(stage_row(without, 0)[kMaster], 3.438, 1e-3) << without;
  EXPECT_NEAR(stage_row(without, 0)[kTotal], 15.471, 1e-3) << without;
  EXPECT_NEAR(stage_row(without, 3)[kTotal], 3.438, 1e-3) << without;
  // With it, the same formula of the adapters' P plus the frozen base: stage 0 1.719 + 18P = 1.733 GB; stage 3
  // 1.719 + 16P/N = 1.722 GB (frozen parameters stay outside the flat buffers: not sharded, even at stage 3).
  EXPECT_NEAR(stage_row(with, 0)[kMaster], 0.003, 1e-3) << with;
  EXPECT_NEAR(stage_row(with, 0)[kOptimizer], 0.006, 1e-3) << with;
  EXPECT_NEAR(stage_row(with, 0)[kTotal], 1.733, 1e-3) << with;
  EXPECT_NEAR(stage_row(with, 3)[kTotal], 1.722, 1e-3) << with;
  for (int stage = 0; stage <= 3; ++stage) {
    const std::vector<double> row = stage_row(with, stage);
    EXPECT_LT(row[kParams], 0.002 + 1e-9) << "stage " << stage << ": the frozen base is not in the params column";
    EXPECT_GE(row[kTotal], 1.719) << "stage " << stage << ": the frozen base is in every stage's total";
  }
}

}  // namespace
