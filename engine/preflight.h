// The pre-flight memory check: before anything is allocated, the per-rank model state of the asked-for
// stage (the formula `zest estimate` prints) plus the transient buffers (gradient buckets in flight,
// stage 3's gathered buckets) is compared with the device's free memory, and a run that cannot fit is
// refused with what would: the other stages' needs, or how many GPUs the asked-for stage needs. With the
// optimizer offloaded, what the ranks of one host keep in host memory is compared with its available memory.
#pragma once

#include "engine/memory_model.h"
#include "optim/optim_config.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace zest {

struct PreflightInputs {
  MemoryModelInputs model_state;     // P, N, stage, dtypes, optimizer bytes
  bool ema = false;
  int64_t largest_bucket_numel = 0;  // padded elements of the largest bucket (0: unknown, none counted)
  int prefetch = 1;                  // stage 3
};

// The inputs of a run before its model is built (no bucket sizes yet).
PreflightInputs preflight_inputs_for(int64_t numel, int world_size, const EngineConfig& engine,
                                     const OptimConfig& optim, bool ema);
// Bytes one rank needs at `stage` (model state + transient buffers).
int64_t preflight_bytes(const PreflightInputs& in, int stage);
// "" when the run fits in `free_bytes`, else the refusal (names the device, each stage's need, and the GPUs
// the asked-for stage would need).
std::string preflight_problem(const PreflightInputs& in, int64_t free_bytes, const std::string& device_name);
// Host bytes one rank needs with the optimizer offloaded: its offloaded state and staging ring, plus
// kProcessHostBytes for the process itself (libraries, CUDA context). 0 without offload.
constexpr int64_t kProcessHostBytes = 2'000'000'000;
int64_t preflight_host_bytes(const PreflightInputs& in);
// "" when `ranks_on_host` ranks fit in `available_bytes` of host memory, else the refusal (names the
// need per rank and per host, what the host has, and how many ranks spread over hosts would fit).
std::string host_preflight_problem(const PreflightInputs& in, int ranks_on_host, int64_t available_bytes);
// Free bytes of `device` now (CUDA: cudaMemGetInfo), or -1 when not known (the CPU: the check is skipped).
int64_t device_free_bytes(const torch::Device& device);
// Free and total bytes of `device` (CUDA: cudaMemGetInfo; the CPU: MemAvailable and MemTotal), -1 when
// not known; for messages.
struct DeviceMemoryInfo {
  int64_t free_bytes = -1;
  int64_t total_bytes = -1;
};
DeviceMemoryInfo device_memory_info(const torch::Device& device);
// MemAvailable of /proc/meminfo in bytes, or -1 when not known (the host check is then skipped).
int64_t host_available_bytes();
// Throws zest::Error with preflight_problem's (or host_preflight_problem's) text when the run does not
// fit `device` (or, offloaded from a GPU, the host's memory shared by `ranks_on_host` ranks).
// model_host_bytes: host memory each rank's model holds now and gives back when it moves to the GPU
// (the engine checks after the model was built on the CPU; the CLI checks before building it).
void check_fits(const PreflightInputs& in, const torch::Device& device, int ranks_on_host,
                int64_t model_host_bytes = 0);

}  // namespace zest
