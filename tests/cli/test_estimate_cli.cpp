// `zest estimate`: the ZeRO paper's figures from the built binary, and its argument errors.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

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

}  // namespace
