// `zest estimate`: the ZeRO paper's figures from the built binary, and its argument errors.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

std::pair<int, std::string> run(const std::string& args) {
  const std::string command = std::string(ZEST_BINARY_DIR) + "/zest estimate " + args + " 2>&1";
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
  EXPECT_NE(out.find("1.875"), std::string::npos) << out;    // stage 3
}

TEST(EstimateCli, FromARunFileAndBadArguments) {
  const auto [status, out] = run("--config " + std::string(ZEST_SOURCE_DIR) + "/configs/hymotion_tiny.toml --world 2");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("181,036 parameters"), std::string::npos) << out;
  const auto [bad_status, bad_out] = run("--params 100 --world 2 --precision fp8");
  EXPECT_NE(bad_status, 0);
  EXPECT_NE(bad_out.find("--precision must be bf16, fp16 or fp32"), std::string::npos) << bad_out;
}

}  // namespace
