// `zest bench --profile DIR`: the GPU kernels of a few extra steps, recorded by LibTorch's Kineto
// profiler and summed by kernel name — where the step's device time goes, without a separate profiler.
// CUDA builds only (Kineto with CUPTI); elsewhere starting a profile is refused.
#pragma once

#include "formats/chrome_trace.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace zest {

class KernelProfile {
 public:
  KernelProfile();  // starts recording device kernels
  ~KernelProfile();
  KernelProfile(const KernelProfile&) = delete;
  KernelProfile& operator=(const KernelProfile&) = delete;

  // Stops recording; writes every kernel name with its time and launches per step (over `steps` steps)
  // to `table_path` (tab-separated, slowest first; no table when it is empty) and returns the per-step sums
  // of kernel time (NCCL's apart: it overlaps), the launches per step and the `top` heaviest kernels.
  // `trace`: also adds every recorded event to it (profiling/step_trace.h): kernels, copies and memsets on
  // their device and stream (pid = device index, tid = stream, as torch's traces), operators on their thread.
  nlohmann::json finish(int steps, const std::string& table_path, int top, ChromeTrace* trace = nullptr);

 private:
  bool recording_ = false;
};

}  // namespace zest
