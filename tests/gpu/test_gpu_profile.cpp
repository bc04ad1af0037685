// The kernel profile behind `zest bench --profile` (ctest label `gpu`): a bf16 matrix product recorded,
// its kernel named in the table and the returned top list, with a plausible time.
#include "common/temp_dir.h"
#include "profiling/kernel_profile.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

namespace zest::testing {
namespace {

TEST(GpuKernelProfile, RecordsTheMatrixProductsOfTwoSteps) {
  const TempDir dir("profile");
  const auto a = torch::randn({4096, 4096}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16));
  torch::cuda::synchronize();
  KernelProfile recording;
  for (int step = 0; step < 2; ++step) {
    for (int i = 0; i < 3; ++i) (void)a.mm(a);
  }
  torch::cuda::synchronize();
  const std::string table_path = dir.path() + "/kernels.tsv";
  const auto summary = recording.finish(2, table_path, 5);

  // 3 products of 2·4096³ FLOPs per step: at least 0.1 ms of kernel time per step, at most a second.
  EXPECT_GT(summary["kernel_ms_per_step"].get<double>(), 0.1) << summary.dump();
  EXPECT_LT(summary["kernel_ms_per_step"].get<double>(), 1000.0) << summary.dump();
  ASSERT_FALSE(summary["top"].empty()) << summary.dump();
  EXPECT_DOUBLE_EQ(summary["top"][0]["launches"].get<double>(), 3.0) << summary.dump();
  // The products are attributed to the operator that launched them.
  ASSERT_FALSE(summary["top_operators"].empty()) << summary.dump();
  EXPECT_NE(summary["top_operators"][0]["operator"].get<std::string>().find("aten::mm"), std::string::npos)
      << summary.dump();
  std::ifstream table(table_path);
  std::stringstream text;
  text << table.rdbuf();
  EXPECT_NE(text.str().find(summary["top"][0]["kernel"].get<std::string>().substr(0, 40)), std::string::npos)
      << text.str();
}

}  // namespace
}  // namespace zest::testing
