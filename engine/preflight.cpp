// Pre-flight memory check (see preflight.h).
#include "engine/preflight.h"

#include "core/check.h"
#include "core/number_text.h"
#include "engine/sharding_policy.h"
#include "optim/optimizer.h"

#include <algorithm>
#include <fstream>

namespace zest {

#ifdef ZEST_WITH_CUDA
int64_t cuda_free_bytes(int device_index);  // engine/preflight_cuda.cpp
int64_t cuda_total_bytes(int device_index);
#endif

namespace {

// The policy `stage` would run under with the inputs' world size (the engine's own choice, ShardingPolicy).
ShardingPolicy policy_of(const MemoryModelInputs& m, int stage) {
  return ShardingPolicy::for_stage(stage, m.world_size);
}

}  // namespace

PreflightInputs preflight_inputs_for(int64_t numel, int world_size, const EngineConfig& engine,
                                     const OptimConfig& optim, bool ema) {
  PreflightInputs in;
  in.model_state = {numel, world_size, engine.stage, engine.precision, engine.reduce_dtype,
                    optimizer_state_bytes_per_element(optim)};
  in.model_state.offload_optimizer = engine.offload_optimizer != OffloadTarget::none;
  in.model_state.offload_staging_bytes = engine.offload_staging_bytes();
  in.model_state.optimizer_in_backward = engine.optimizer_in_backward;
  in.ema = ema;
  in.prefetch = engine.prefetch;
  return in;
}

int64_t preflight_bytes(const PreflightInputs& in, int stage) {
  const ShardingPolicy policy = policy_of(in.model_state, stage);
  MemoryModelInputs m = in.model_state;
  m.stage = stage;
  m.ema = in.ema;
  m.offload_optimizer = m.offload_optimizer && policy.can_offload_optimizer();
  int64_t bytes = estimate_model_state_bytes(m).on_device();
  const int64_t bucket = in.largest_bucket_numel;
  // The engine waits for a bucket's reduction two buckets later: three transient gradient buffers at most;
  // updates in backward likewise keep a bucket's per-step gradients until the next bucket's update.
  if (policy.has_transient_grads() || m.optimizer_in_backward) bytes += 3 * bucket * dtype_bytes(m.reduce_dtype);
  // Stage 3's gathered buckets: the running one, `prefetch` ahead, and the last, kept for backward.
  if (policy.gathers_per_unit()) bytes += (in.prefetch + 2) * bucket * dtype_bytes(m.precision);
  return bytes;
}

std::string preflight_problem(const PreflightInputs& in, int64_t free_bytes, const std::string& device_name) {
  const int stage = in.model_state.stage;
  const int64_t need = preflight_bytes(in, stage);
  if (need <= free_bytes) return "";
  std::string message = str("stage ", stage, " needs ", gigabytes_text(need), " of model state per GPU (",
                            in.model_state.numel, " parameters on ", in.model_state.world_size, " GPU(s)); this ",
                            device_name, " has ", gigabytes_text(free_bytes), " free");
  std::string fits;
  for (int other = 0; other <= ShardingPolicy::kMaxStage; ++other) {
    if (other == stage) continue;
    const int64_t other_need = preflight_bytes(in, other);
    if (other_need <= free_bytes)
      fits += str(fits.empty() ? "; " : ", ", "stage ", other, " needs ", gigabytes_text(other_need));
  }
  // The fewest GPUs that fit the asked-for stage (one that owns whole units does not shrink with more GPUs).
  std::string gpus;
  if (!policy_of(in.model_state, stage).owns_whole_units()) {
    PreflightInputs more = in;
    for (int n = in.model_state.world_size + 1; n <= 4096; ++n) {
      more.model_state.world_size = n;
      if (preflight_bytes(more, stage) <= free_bytes) {
        gpus = str("stage ", stage, " fits on ", n, " GPUs");
        break;
      }
    }
  }
  // Offloading the optimizer (stages 1–3) leaves only parameters and gradients on the GPU.
  if (!in.model_state.offload_optimizer) {
    PreflightInputs offloaded = in;
    offloaded.model_state.offload_optimizer = true;
    for (int s = stage; s <= ShardingPolicy::kMaxStage; ++s) {
      if (!policy_of(in.model_state, s).can_offload_optimizer()) continue;
      const int64_t with_offload = preflight_bytes(offloaded, s);
      if (with_offload > free_bytes) continue;
      fits += str(fits.empty() ? "; " : ", ", "stage ", s, " with [engine.offload] optimizer = \"cpu\" needs ",
                  gigabytes_text(with_offload), " on the GPU");
      break;
    }
  }
  message += fits;
  message += gpus.empty() ? (fits.empty() ? "; no stage fits: add GPUs or offload" : "; or add GPUs")
                          : (fits.empty() ? "; " : ", or ") + gpus;
  return message + " (activations come on top)";
}

int64_t preflight_host_bytes(const PreflightInputs& in) {
  if (!in.model_state.offload_optimizer || !policy_of(in.model_state, in.model_state.stage).can_offload_optimizer())
    return 0;
  MemoryModelInputs m = in.model_state;
  m.ema = in.ema;
  return estimate_model_state_bytes(m).on_host() + kProcessHostBytes;
}

std::string host_preflight_problem(const PreflightInputs& in, int ranks_on_host, int64_t available_bytes) {
  const int64_t per_rank = preflight_host_bytes(in);
  if (per_rank * ranks_on_host <= available_bytes) return "";
  std::string message =
      str("stage ", in.model_state.stage, " with [engine.offload] optimizer = \"cpu\" needs ",
          gigabytes_text(per_rank), " of host memory per rank (master, optimizer state", in.ema ? ", EMA" : "",
          " and staging for ", in.model_state.numel, " parameters on ", in.model_state.world_size, " rank(s), with ",
          gigabytes_text(kProcessHostBytes), " for the process), ", gigabytes_text(per_rank * ranks_on_host),
          " for the ", ranks_on_host, " rank(s) on this host; this host has ", gigabytes_text(available_bytes),
          " available (MemAvailable)");
  PreflightInputs more = in;
  for (int n = in.model_state.world_size + 1; n <= 65536; ++n) {
    more.model_state.world_size = n;
    if (preflight_host_bytes(more) * ranks_on_host <= available_bytes) {
      return message + str("; it fits on ", n, " ranks with ", ranks_on_host, " per host");
    }
  }
  return message + "; it does not fit this host at any world size";
}

namespace {

int64_t meminfo_bytes(const std::string& wanted) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == wanted) return kib * 1024;
  }
  return -1;
}

}  // namespace

int64_t host_available_bytes() { return meminfo_bytes("MemAvailable:"); }

DeviceMemoryInfo device_memory_info(const torch::Device& device) {
#ifdef ZEST_WITH_CUDA
  if (device.is_cuda()) return {cuda_free_bytes(device.index()), cuda_total_bytes(device.index())};
#endif
  if (device.is_cpu()) return {meminfo_bytes("MemAvailable:"), meminfo_bytes("MemTotal:")};
  return {};
}

int64_t device_free_bytes(const torch::Device& device) {
#ifdef ZEST_WITH_CUDA
  if (device.is_cuda()) return cuda_free_bytes(device.index());
#endif
  return -1;
}

void check_fits(const PreflightInputs& in, const torch::Device& device, int ranks_on_host, int64_t model_host_bytes) {
  const int64_t free_bytes = device_free_bytes(device);
  if (free_bytes >= 0) {
    const std::string problem = preflight_problem(in, free_bytes, device.is_cuda() ? "GPU" : device.str());
    if (!problem.empty()) throw Error(problem);
  }
  // A CPU run keeps everything in host memory whether offloaded or not, and is not checked.
  if (!device.is_cuda() || preflight_host_bytes(in) == 0) return;
  const int64_t available = host_available_bytes();
  if (available < 0) return;
  const std::string problem = host_preflight_problem(in, ranks_on_host, available + ranks_on_host * model_host_bytes);
  if (!problem.empty()) throw Error(problem);
}

}  // namespace zest
