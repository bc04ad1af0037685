// The Kineto recording behind KernelProfile (see kernel_profile.h): CPU and CUDA activities, then the
// device kernels, memory copies and sets summed by name.
#include "core/check.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace zest {
namespace {

namespace kineto = torch::profiler::impl;

const std::set<kineto::ActivityType>& activities() {
  static const std::set<kineto::ActivityType> kinds{kineto::ActivityType::CPU, kineto::ActivityType::CUDA};
  return kinds;
}

struct KernelTotal {
  std::string name;
  double ms = 0.0;
  int64_t launches = 0;
};

}  // namespace

void start_cuda_kernel_profile() {
  const kineto::ProfilerConfig config(kineto::ProfilerState::KINETO);
  torch::autograd::profiler::prepareProfiler(config, activities());
  torch::autograd::profiler::enableProfiler(config, activities());
}

void stop_cuda_kernel_profile() { (void)torch::autograd::profiler::disableProfiler(); }

nlohmann::json finish_cuda_kernel_profile(int steps, const std::string& table_path, int top) {
  const auto result = torch::autograd::profiler::disableProfiler();
  std::map<std::string, KernelTotal> by_name;
  double compute_ms = 0.0, nccl_ms = 0.0;  // NCCL's kernels run on their own stream, overlapped
  for (const auto& event : result->events()) {
    if (event.deviceType() != c10::DeviceType::CUDA) continue;
    auto& total = by_name[event.name()];
    total.name = event.name();
    const double ms = static_cast<double>(event.durationNs()) / 1e6 / steps;
    total.ms += ms;
    total.launches += 1;
    (total.name.rfind("nccl", 0) == 0 ? nccl_ms : compute_ms) += ms;
  }
  std::vector<KernelTotal> kernels;
  for (auto& [name, total] : by_name) kernels.push_back(std::move(total));
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });

  std::ofstream table(table_path);
  ZEST_CHECK(table, "bench: cannot write the kernel table ", table_path);
  table << "ms_per_step\tlaunches_per_step\tkernel\n";
  for (const auto& k : kernels) table << k.ms << '\t' << static_cast<double>(k.launches) / steps << '\t' << k.name << '\n';
  ZEST_CHECK(table.flush(), "bench: writing the kernel table ", table_path, " failed");

  nlohmann::json heaviest = nlohmann::json::array();
  for (size_t i = 0; i < kernels.size() && static_cast<int>(i) < top; ++i) {
    heaviest.push_back({{"kernel", kernels[i].name.substr(0, 120)},
                        {"ms", kernels[i].ms},
                        {"launches", static_cast<double>(kernels[i].launches) / steps}});
  }
  int64_t launches = 0;
  for (const auto& k : kernels) launches += k.launches;
  return {{"steps", steps},
          {"kernel_ms_per_step", compute_ms},
          {"nccl_kernel_ms_per_step", nccl_ms},
          {"launches_per_step", static_cast<double>(launches) / steps},
          {"table", table_path},
          {"top", heaviest}};
}

}  // namespace zest
