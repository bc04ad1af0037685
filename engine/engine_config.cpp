// EngineConfig: enums ↔ dtypes and names, and the [engine] / [engine.loss_scale] TOML reader (strict,
// with cross-field rules) and writer.
#include "engine/engine_config.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "engine/sharding_policy.h"

#include <cmath>
#include <thread>

namespace zest {

torch::Dtype to_dtype(Precision p) {
  switch (p) {
    case Precision::fp32: return torch::kFloat32;
    case Precision::bf16: return torch::kBFloat16;
    case Precision::fp16: return torch::kFloat16;
  }
  ZEST_FAIL("unknown precision");
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

std::optional<Precision> precision_named(const std::string& name) {
  for (const Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
    if (name == to_string(p)) return p;
  return std::nullopt;
}

const char* to_string(AtMinScale a) { return a == AtMinScale::warn ? "warn" : "error"; }

const char* to_string(CheckpointPolicy p) {
  switch (p) {
    case CheckpointPolicy::none: return "none";
    case CheckpointPolicy::all: return "all";
    case CheckpointPolicy::every_k: return "every_k";
  }
  return "?";
}

const char* to_string(DeviceKind d) {
  switch (d) {
    case DeviceKind::auto_: return "auto";
    case DeviceKind::cuda: return "cuda";
    case DeviceKind::cpu: return "cpu";
  }
  return "?";
}

const char* to_string(OffloadTarget t) { return t == OffloadTarget::cpu ? "cpu" : "none"; }
const char* to_string(CudaGraphs g) { return g == CudaGraphs::off ? "off" : "auto"; }

bool is_cuda_available() {
#ifdef ZEST_WITH_CUDA
  return torch::cuda::is_available();
#else
  return false;
#endif
}

DeviceKind EngineConfig::resolved_device() const {
  if (device != DeviceKind::auto_) return device;
  return is_cuda_available() ? DeviceKind::cuda : DeviceKind::cpu;
}

namespace {

constexpr DeviceKind kDevices[] = {DeviceKind::auto_, DeviceKind::cuda, DeviceKind::cpu};
constexpr Precision kPrecisions[] = {Precision::fp32, Precision::bf16, Precision::fp16};
constexpr CheckpointPolicy kPolicies[] = {CheckpointPolicy::none, CheckpointPolicy::all, CheckpointPolicy::every_k};
constexpr AtMinScale kAtMin[] = {AtMinScale::warn, AtMinScale::error};
constexpr OffloadTarget kOffloadTargets[] = {OffloadTarget::none, OffloadTarget::cpu};
constexpr CudaGraphs kCudaGraphs[] = {CudaGraphs::auto_, CudaGraphs::off};

// DeepSpeed spellings people bring along, with the zest key to use instead.
const std::map<std::string, std::string> kEngineHints = {
    {"gradient_accumulation_steps", "zest calls it accumulation_steps"},
    {"gradient_clipping", "zest calls it clip_norm"},
    {"reduce_bucket_size", "zest calls it bucket_mb, in MiB"},
    {"communication_data_type", "zest calls it reduce_dtype"},
    {"zero_optimization", "the ZeRO stage is engine.stage"},
    {"offload_optimizer", "zest reads [engine.offload] optimizer = \"cpu\""},
    {"benchmark", "zest calls it cudnn_benchmark"},
};
const std::map<std::string, std::string> kOffloadHints = {
    {"device", "zest calls it optimizer = \"cpu\""},
    {"pin_memory", "zest always pins the host buffers on a GPU"},
    {"buffer_size", "zest sizes its page-locked ring with staging_mb, in MiB"},
    {"buffer_count", "zest sizes its page-locked ring with staging_mb, in MiB"},
};
const std::map<std::string, std::string> kLossScaleHints = {
    {"initial_scale_power", "zest takes the scale itself: initial = 65536.0 for 2^16"},
    {"loss_scale_window", "zest calls it window"},
    {"min_loss_scale", "zest calls it min"},
};

void check(ConfigTable& table, bool ok, const std::string& key, const std::string& message) {
  if (!ok) table.fail(key, message);
}

LossScaleConfig read_loss_scale(ConfigTable& table) {
  LossScaleConfig c;
  c.initial = table.get("initial", c.initial);
  c.window = table.get("window", c.window);
  c.hysteresis = table.get("hysteresis", c.hysteresis);
  c.min = table.get("min", c.min);
  c.at_min = table.get_enum("at_min", c.at_min, kAtMin);
  table.reject_unknown_keys(kLossScaleHints);

  check(table, std::isfinite(c.initial) && c.initial > 0, "initial", "must be a positive finite number");
  check(table, c.window >= 1, "window", "must be >= 1 (clean steps before the scale doubles)");
  check(table, c.hysteresis >= 1, "hysteresis", "must be >= 1 (1 = halve on every overflow)");
  check(table, std::isfinite(c.min) && c.min > 0, "min", "must be a positive finite number");
  check(table, c.min <= c.initial, "min",
        "must be <= initial (" + toml_float(c.min) + " > " + toml_float(c.initial) + ")");
  return c;
}

// The stage's sharding as far as settings go: the world size decides only stage 2's one-rank shortcut,
// which no setting depends on. `stage` is valid (ShardingPolicy::is_stage).
ShardingPolicy sharding_of(const EngineConfig& c) { return ShardingPolicy::for_stage(c.stage, /*world_size=*/1); }

void check_ranges(ConfigTable& table, const EngineConfig& c) {
  check(table, ShardingPolicy::is_stage(c.stage), "stage",
        "must be 0, 1, 2 or 3 (got " + std::to_string(c.stage) + ")");
  check(table, c.prefetch >= 0 && c.prefetch <= 16, "prefetch", "must be between 0 and 16 (buckets gathered ahead)");
  for (const char* key : {"reshard_after_forward", "prefetch"}) {
    check(table, sharding_of(c).gathers_per_unit() || !table.has(key), key,
          "is only used with stage = 3 (stage is " + std::to_string(c.stage) + ")");
  }
  check(table, c.accumulation_steps >= 1, "accumulation_steps", "must be >= 1");
  check(table, std::isfinite(c.clip_norm) && c.clip_norm >= 0, "clip_norm", "must be >= 0 (0 = no clipping)");
  check(table, std::isfinite(c.bucket_mb) && c.bucket_mb > 0, "bucket_mb", "must be > 0");
  check(table, c.checkpoint_every >= 1, "checkpoint_every", "must be >= 1");
  check(table, c.activation_checkpointing == CheckpointPolicy::every_k || !table.has("checkpoint_every"),
        "checkpoint_every",
        std::string("is only used with activation_checkpointing = \"every_k\" (it is \"") +
            to_string(c.activation_checkpointing) + "\")");
  check(table, c.max_nonfinite_steps >= 1, "max_nonfinite_steps", "must be >= 1");
  // Each intra-op thread joins every parallel region: thousands of them stall a run on any machine.
  constexpr int kMaxThreads = 1024;
  check(table, c.threads >= 0 && c.threads <= kMaxThreads, "threads",
        "must be between 0 and " + std::to_string(kMaxThreads) + " (0 = cores / local ranks; this machine has " +
            std::to_string(std::thread::hardware_concurrency()) + " cores, and more threads than cores only slow a step)");
  check(table, std::isfinite(c.collective_timeout_s) && c.collective_timeout_s > 0, "collective_timeout_s",
        "must be > 0 seconds");
  check(table, std::isfinite(c.rendezvous_timeout_s) && c.rendezvous_timeout_s > 0, "rendezvous_timeout_s",
        "must be > 0 seconds");
}

}  // namespace

void check_supported_here(ConfigTable& table, const EngineConfig& c) {
  if (c.device == DeviceKind::cuda && !is_cuda_available()) {
    table.fail("device", "\"cuda\" was asked for, but this zest build or machine has no CUDA GPU; use \"cpu\" "
                         "or \"auto\"");
  }
  if (c.precision == Precision::fp16 && c.resolved_device() == DeviceKind::cpu) {
    table.fail(table.has("precision") ? "precision" : "device",
               "fp16 runs on CUDA GPUs only (LibTorch's CPU kernels have no fp16 matrix products); on the CPU "
               "use precision = \"bf16\" or \"fp32\"");
  }
}

EngineConfig EngineConfig::from_toml(ConfigTable& table) {
  EngineConfig c;
  c.stage = table.get("stage", c.stage);
  c.device = table.get_enum("device", c.device, kDevices);
  c.collective_timeout_s = table.get("collective_timeout_s", c.collective_timeout_s);
  c.rendezvous_timeout_s = table.get("rendezvous_timeout_s", c.rendezvous_timeout_s);
  c.reshard_after_forward = table.get("reshard_after_forward", c.reshard_after_forward);
  c.prefetch = table.get("prefetch", c.prefetch);
  c.precision = table.get_enum("precision", c.precision, kPrecisions);
  c.reduce_dtype = table.get_enum("reduce_dtype", c.reduce_dtype, kPrecisions);
  c.accumulation_steps = table.get("accumulation_steps", c.accumulation_steps);
  c.clip_norm = table.get("clip_norm", c.clip_norm);
  c.bucket_mb = table.get("bucket_mb", c.bucket_mb);
  c.activation_checkpointing = table.get_enum("activation_checkpointing", c.activation_checkpointing, kPolicies);
  c.checkpoint_every = table.get("checkpoint_every", c.checkpoint_every);
  c.max_nonfinite_steps = table.get("max_nonfinite_steps", c.max_nonfinite_steps);
  c.threads = table.get("threads", c.threads);
  c.cuda_graphs = table.get_enum("cuda_graphs", c.cuda_graphs, kCudaGraphs);
  c.cudnn_benchmark = table.get("cudnn_benchmark", c.cudnn_benchmark);
  ConfigTable offload = table.table("offload");
  c.offload_optimizer = offload.get_enum("optimizer", c.offload_optimizer, kOffloadTargets);
  c.offload_staging_mb = offload.get("staging_mb", c.offload_staging_mb);
  offload.reject_unknown_keys(kOffloadHints);
  check(offload, std::isfinite(c.offload_staging_mb) && c.offload_staging_mb > 0, "staging_mb", "must be > 0 (MiB)");
  check(offload, c.offload_optimizer != OffloadTarget::none || !offload.has("staging_mb"), "staging_mb",
        "is only used with optimizer = \"cpu\"");
  // Stage 0 keeps the full optimizer state on every rank: offloading it is DP with a host optimizer,
  // which no one wants; DeepSpeed likewise offloads from stage 1 up.
  if (c.offload_optimizer != OffloadTarget::none && ShardingPolicy::is_stage(c.stage) &&
      !sharding_of(c).can_offload_optimizer())
    offload.fail("optimizer", "offloading the optimizer needs engine.stage = 1, 2 or 3 (stage is 0)");
  ConfigTable loss_scale = table.table("loss_scale");
  if (c.precision == Precision::fp16) c.loss_scale = read_loss_scale(loss_scale);
  table.reject_unknown_keys(kEngineHints);

  // A loss scaler only exists for fp16; accepting its settings otherwise would silently ignore them.
  if (c.precision != Precision::fp16 && table.has("loss_scale"))
    table.fail("loss_scale", std::string("[engine.loss_scale] is only used with precision = \"fp16\" (precision is \"") +
                                 to_string(c.precision) + "\"); remove it or set engine.precision = \"fp16\"");
  check_ranges(table, c);
  return c;
}

void to_toml(const EngineConfig& c, ConfigWriter& out) {
  ConfigWriter& t = out.table("engine", "ZeRO engine: sharding stage, precision, accumulation, clipping");
  t.set("stage", c.stage, "0 = DP, 1 = optimizer state sharded, 2 = + gradients sharded, 3 = + parameters sharded");
  t.set("device", to_string(c.device), "auto|cuda|cpu; auto = CUDA when present (GPU LOCAL_RANK per rank)");
  t.set("collective_timeout_s", c.collective_timeout_s, "a collective not done by then ends every rank, named");
  t.set("rendezvous_timeout_s", c.rendezvous_timeout_s, "every rank must have joined the world by then");
  if (sharding_of(c).gathers_per_unit()) {
    t.set("reshard_after_forward", c.reshard_after_forward, "free a unit's gathered parameters after its forward");
    t.set("prefetch", c.prefetch, "buckets gathered ahead of the running one");
  }
  t.set("precision", to_string(c.precision), "compute dtype of parameters and activations: fp32|bf16|fp16");
  t.set("reduce_dtype", to_string(c.reduce_dtype), "dtype gradients are reduced in: fp32|bf16|fp16");
  t.set("accumulation_steps", c.accumulation_steps, "micro-batches per optimizer step");
  t.set("clip_norm", c.clip_norm, "global gradient-norm clip; 0 = off");
  t.set("bucket_mb", c.bucket_mb, "small neighbouring units are fused up to this size (MiB)");
  t.set("activation_checkpointing", to_string(c.activation_checkpointing), "none|all|every_k");
  if (c.activation_checkpointing == CheckpointPolicy::every_k)  // refused with the other policies
    t.set("checkpoint_every", c.checkpoint_every, "checkpoint every k-th unit");
  t.set("max_nonfinite_steps", c.max_nonfinite_steps, "consecutive skipped non-finite steps before the run stops");
  t.set("threads", c.threads, "intra-op threads per rank; 0 = cores / local ranks");
  t.set("cuda_graphs", to_string(c.cuda_graphs), "auto|off: replay whole steps as CUDA graphs (auto: where capturable)");
  t.set("cudnn_benchmark", c.cudnn_benchmark, "CUDA: time cuDNN's convolution algorithms per shape, keep the fastest");
  if (c.offload_optimizer != OffloadTarget::none) {
    ConfigWriter& off = t.table("offload", "ZeRO-Offload: master weights and optimizer state in host memory");
    off.set("optimizer", to_string(c.offload_optimizer), "none|cpu: where the master and optimizer state live");
    off.set("staging_mb", c.offload_staging_mb, "page-locked host ring the gradients and parameters cross PCIe through");
  }
  if (c.precision != Precision::fp16) return;
  ConfigWriter& ls = t.table("loss_scale", "fp16 dynamic loss scaling");
  ls.set("initial", c.loss_scale.initial, "starting scale (65536 = 2^16)");
  ls.set("window", c.loss_scale.window, "clean steps before the scale doubles");
  ls.set("hysteresis", c.loss_scale.hysteresis, "overflows tolerated before the scale halves");
  ls.set("min", c.loss_scale.min, "floor of the scale");
  ls.set("at_min", to_string(c.loss_scale.at_min), "overflow at the floor: warn|error");
}

}  // namespace zest
