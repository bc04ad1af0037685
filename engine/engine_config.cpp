// EngineConfig: enums ↔ dtypes and names, and the [engine] / [engine.loss_scale] TOML reader (strict,
// with cross-field rules) and writer.
#include "engine/engine_config.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
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

const char* to_string(MatmulPrecision m) { return m == MatmulPrecision::fp8 ? "fp8" : "bf16"; }

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
constexpr MatmulPrecision kMatmuls[] = {MatmulPrecision::bf16, MatmulPrecision::fp8};

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

// The stage's sharding as far as settings go: the world size decides only stage 2's one-rank shortcut,
// which no setting depends on.
ShardingPolicy sharding_of(const EngineConfig& c) {
  return ShardingPolicy::for_stage(ShardingPolicy::is_stage(c.stage) ? c.stage : 2, /*world_size=*/1);
}

bool gathers_per_unit(const EngineConfig& c) {
  return ShardingPolicy::is_stage(c.stage) && sharding_of(c).gathers_per_unit();
}

std::string only_with_stage_3(const EngineConfig& c) {
  return "is only used with stage = 3 (stage is " + std::to_string(c.stage) + ")";
}

const FieldTable<LossScaleConfig>& loss_scale_fields() {
  static const FieldTable<LossScaleConfig> table = [] {
    using C = LossScaleConfig;
    FieldTable<C> t("loss_scale", "fp16 dynamic loss scaling", kLossScaleHints);
    t.number("initial", &C::initial, "starting scale (65536 = 2^16)")
        .above(0, "must be a positive finite number")
        .reference("starting loss scale (2^16)");
    t.integer("window", &C::window, "clean steps before the scale doubles")
        .at_least(1, "must be >= 1 (clean steps before the scale doubles)");
    t.integer("hysteresis", &C::hysteresis, "overflows tolerated before the scale halves")
        .at_least(1, "must be >= 1 (1 = halve on every overflow)")
        .reference("overflows tolerated before the scale halves (1 = halve on every overflow)");
    t.number("min", &C::min, "floor of the scale")
        .above(0, "must be a positive finite number")
        .check([](const C& c) { return c.min <= c.initial; },
               [](const C& c) { return "must be <= initial (" + toml_float(c.min) + " > " + toml_float(c.initial) + ")"; })
        .type("float > 0, ≤ initial");
    t.enumeration("at_min", &C::at_min, kAtMin, "overflow at the floor: warn|error")
        .reference("what an overflow at the floor does");
    return t;
  }();
  return table;
}

}  // namespace

const FieldTable<EngineConfig>& engine_fields() {
  static const FieldTable<EngineConfig> table = [] {
    using C = EngineConfig;
    FieldTable<C> t("engine", "ZeRO engine: sharding stage, precision, accumulation, clipping", kEngineHints);
    t.section("offload", "ZeRO-Offload: master weights and optimizer state in host memory", kOffloadHints);
    t.integer("stage", &C::stage, "0 = DP, 1 = optimizer state sharded, 2 = + gradients sharded, 3 = + parameters sharded")
        .check([](const C& c) { return ShardingPolicy::is_stage(c.stage); },
               [](const C& c) { return "must be 0, 1, 2 or 3 (got " + std::to_string(c.stage) + ")"; })
        .type("0, 1, 2, 3")
        .reference("0 = data parallel, 1 = optimizer state sharded, 2 = + gradients sharded, 3 = + parameters "
                   "sharded at rest (gathered per bucket for its forward and backward)");
    t.enumeration("device", &C::device, kDevices, "auto|cuda|cpu; auto = CUDA when present (GPU LOCAL_RANK per rank)")
        .reference("where the model, flat buffers, master shard and optimizer state live; auto = CUDA when this build "
                   "has it and a GPU is visible; each rank drives the GPU of its local rank. `cuda` without a GPU, and "
                   "fp16 on the CPU, are refused when the run file is read");
    t.number("collective_timeout_s", &C::collective_timeout_s, "a collective not done by then ends every rank, named")
        .above(0, "must be > 0 seconds")
        .reference("a collective not done by then ends the rank with an error naming the operation, the bucket's "
                   "units, the step and the ranks that never arrived (stopped, hung, killed, or elsewhere in the "
                   "program), on the MPI, Gloo and NCCL paths alike; under `zest launch` the launcher then names "
                   "those ranks (`ZEST_COMM_TIMEOUT_S` overrides)");
    t.number("rendezvous_timeout_s", &C::rendezvous_timeout_s, "every rank must have joined the world by then")
        .above(0, "must be > 0 seconds")
        .reference("without MPI (torchrun, `zest launch`, srun, Horovod's Gloo mode): every rank must have joined "
                   "rank 0's store by then; the ranks report who is missing every 10 s while they wait, and at the "
                   "deadline every rank ends naming the ranks (and nodes) that never came. The ranks also agree on "
                   "the world size and on the configuration (a hash of the resolved run file) before the first "
                   "collective (`ZEST_RENDEZVOUS_TIMEOUT_S` overrides)");
    t.boolean("reshard_after_forward", &C::reshard_after_forward, "free a unit's gathered parameters after its forward")
        .only_with(gathers_per_unit, only_with_stage_3)
        .reference("stage 3 only: free a bucket's gathered parameters after its forward (false keeps them until its "
                   "backward: more memory, one gather less)");
    t.integer("prefetch", &C::prefetch, "buckets gathered ahead of the running one")
        .between(0, 16, "must be between 0 and 16 (buckets gathered ahead)")
        .only_with(gathers_per_unit, only_with_stage_3)
        .reference("stage 3 only: buckets gathered ahead of the running one, in forward and in backward order");
    t.enumeration("precision", &C::precision, kPrecisions, "compute dtype of parameters and activations: fp32|bf16|fp16")
        .reference("compute dtype of parameters and activations (master weights and optimizer state are always "
                   "fp32); fp16 needs a GPU");
    t.enumeration("reduce_dtype", &C::reduce_dtype, kPrecisions, "dtype gradients are reduced in: fp32|bf16|fp16")
        .reference("dtype gradients are accumulated and reduced in, at every stage (the full buffer at stages 0/1, "
                   "transient buckets and the shard at 2/3)");
    t.enumeration("matmul", &C::matmul, kMatmuls, "the Linear layers' training products: bf16|fp8")
        .check([](const C& c) { return c.matmul != MatmulPrecision::fp8 || c.precision == Precision::bf16; },
               [](const C& c) {
                 return std::string("\"fp8\" needs precision = \"bf16\" (precision is \"") + to_string(c.precision) +
                        "\")";
               })
        .reference("precision of the Linear layers' training products: `bf16` runs them in the compute dtype; `fp8` "
                   "casts both operands of the forward (x·Wᵀ) and input-gradient (dY·W) products to fp8 with one "
                   "scale per tensor from its current absolute maximum (weights and activations e4m3, gradients "
                   "e5m2) and runs them on fp8 tensor cores, while the weight-gradient products stay bf16 into the "
                   "float32 gradient slots. Needs precision = \"bf16\" and an NVIDIA GPU with fp8 tensor cores "
                   "(compute capability 8.9 or newer); sampling and validation stay bf16; a product fp8 cannot "
                   "take (a dimension not a multiple of 16) runs in bf16 and `zest train`/`zest bench` say so "
                   "(fused path `fp8_matmul`). Off by default: at HY-Motion's release on an H100 the casts cost more than the "
                   "products save (159.2 against 143.0 ms a step; docs/models.md, 5.2)");
    t.integer("accumulation_steps", &C::accumulation_steps, "micro-batches per optimizer step").at_least(1, "must be >= 1");
    t.number("clip_norm", &C::clip_norm, "global gradient-norm clip; 0 = off").at_least(0, "must be >= 0 (0 = no clipping)");
    t.boolean("optimizer_in_backward", &C::optimizer_in_backward,
              "update each bucket in backward as soon as its gradients are reduced, then free them")
        .check([](const C& c) { return !c.optimizer_in_backward || c.clip_norm == 0.0; },
               "needs clip_norm = 0: clipping scales every gradient by the global norm, known only once the last "
               "bucket is reduced")
        .check([](const C& c) { return !c.optimizer_in_backward || c.precision != Precision::fp16; },
               "does not go with precision = \"fp16\": its loss scaler skips whole steps on overflow, decided only "
               "once every gradient is reduced (use \"bf16\")")
        .check([](const C& c) { return !c.optimizer_in_backward || c.offload_optimizer == OffloadTarget::none; },
               "does not go with [engine.offload] optimizer = \"cpu\": the host updates the whole shard after "
               "backward")
        .reference("the optimizer updates each bucket's units during the backward that ends the step, as soon as "
                   "the bucket's gradients are reduced, and their gradient memory is released right after (on "
                   "CUDA on a stream of its own, beside the rest of the backward). A step then holds a bucket or "
                   "two of gradients instead of all of them (stages 0–1, and one rank at any stage; at stages "
                   "2–3 on several ranks the gradient shard stays), as PyTorch's optimizer-in-backward does. Needs "
                   "clip_norm = 0, no fp16 and no optimizer offload. A bucket whose gradient holds inf/nan on "
                   "this rank is not updated and the step counts as skipped (engine.max_nonfinite_steps), but "
                   "the step's other buckets were updated already; the same parameters as without it otherwise");
    t.number("bucket_mb", &C::bucket_mb, "small neighbouring units are fused up to this size (MiB)")
        .above(0, "must be > 0")
        .reference("small neighbouring units are fused into one collective up to this many MiB of gradients in the "
                   "reduce dtype");
    t.enumeration("activation_checkpointing", &C::activation_checkpointing, kPolicies, "none|all|every_k")
        .reference("which units recompute their forward in backward");
    t.integer("checkpoint_every", &C::checkpoint_every, "checkpoint every k-th unit")
        .at_least(1, "must be >= 1")
        .only_with([](const C& c) { return c.activation_checkpointing == CheckpointPolicy::every_k; },
                   [](const C& c) {
                     return std::string("is only used with activation_checkpointing = \"every_k\" (it is \"") +
                            to_string(c.activation_checkpointing) + "\")";
                   })
        .reference("k for `every_k`; an error with any other policy");
    t.integer("max_nonfinite_steps", &C::max_nonfinite_steps, "consecutive skipped non-finite steps before the run stops")
        .at_least(1, "must be >= 1")
        .reference("consecutive skipped (non-finite) steps before the run stops with an error");
    // Each intra-op thread joins every parallel region: thousands of them stall a run on any machine.
    constexpr int kMaxThreads = 1024;
    t.integer("threads", &C::threads, "intra-op threads per rank; 0 = cores / local ranks")
        .between(0, kMaxThreads, [](const C&) {
          return "must be between 0 and " + std::to_string(kMaxThreads) + " (0 = cores / local ranks; this machine has " +
                 std::to_string(std::thread::hardware_concurrency()) +
                 " cores, and more threads than cores only slow a step)";
        })
        .reference("intra-op threads per rank; 0 = cores / local ranks (more threads than cores only slow a step)");
    t.enumeration("cuda_graphs", &C::cuda_graphs, kCudaGraphs, "auto|off: replay whole steps as CUDA graphs (auto: where capturable)")
        .reference("replay whole training steps as CUDA graphs (engine/step_graphs.h): auto = on for CUDA, except "
                   "with optimizer offload or a checkpointed unit seen drawing random numbers in the eager steps "
                   "(dropout; then every step runs eagerly, said once in the log). The graphs' private pool takes the place "
                   "of the eager steps' cache (the log states both), so the device reserves what eager steps reserve: "
                   "HY-Motion 1B at 8 sequences on an H100, 18.65 GiB against the tuned compiled peer's 19.60, for "
                   "46.9 ms a step against its 72.3 (bench/RESULTS.md). Up to 8 batch shapes are captured, each after 2 eager "
                   "steps; steps of other shapes run eagerly");
    t.boolean("cudnn_benchmark", &C::cudnn_benchmark, "CUDA: time cuDNN's convolution algorithms per shape, keep the fastest")
        .reference("on a GPU, time cuDNN's convolution algorithms once per shape and keep the fastest (LibTorch's "
                   "process-wide switch, `torch.backends.cudnn.benchmark` in Python); the timing runs in the first "
                   "steps of each shape, so a few of them are slower");
    t.enumeration("optimizer", &C::offload_optimizer, kOffloadTargets, "none|cpu: where the master and optimizer state live")
        .in("offload")
        .written_when([](const C& c) { return c.offload_optimizer != OffloadTarget::none; })
        .reference("`cpu` (ZeRO-Offload, stages 1–3): the fp32 master shard, the optimizer state and the EMA live in "
                   "host memory and a multithreaded host AdamW/SGD updates them; the GPU keeps only parameters and "
                   "gradients (see \"Optimizer offload\" in README.md)");
    t.number("staging_mb", &C::offload_staging_mb, "page-locked host ring the gradients and parameters cross PCIe through")
        .in("offload")
        .above(0, "must be > 0 (MiB)")
        .only_with([](const C& c) { return c.offload_optimizer != OffloadTarget::none; }, "is only used with optimizer = \"cpu\"")
        .reference("MiB of page-locked host memory (four slots together) through which each step's gradient shard "
                   "goes down and the updated parameters come up, piece by piece; only with `optimizer = \"cpu\"`");
    // A loss scaler only exists for fp16; accepting its settings otherwise would silently ignore them.
    t.nested("loss_scale", &C::loss_scale, loss_scale_fields())
        .only_with([](const C& c) { return c.precision == Precision::fp16; }, [](const C& c) {
          return std::string("[engine.loss_scale] is only used with precision = \"fp16\" (precision is \"") +
                 to_string(c.precision) + "\"); remove it or set engine.precision = \"fp16\"";
        });
    t.nested("kernels", &C::kernels, kernels_fields());
    // Stage 0 keeps the full optimizer state on every rank: offloading it is DP with a host optimizer,
    // which no one wants; DeepSpeed likewise offloads from stage 1 up.
    t.rules([](ConfigTable& table, EngineConfig& c) {
      if (c.offload_optimizer != OffloadTarget::none && ShardingPolicy::is_stage(c.stage) &&
          !sharding_of(c).can_offload_optimizer())
        table.table("offload").fail("optimizer", "offloading the optimizer needs engine.stage = 1, 2 or 3 (stage is 0)");
    });
    return t;
  }();
  return table;
}

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
  if (c.matmul == MatmulPrecision::fp8 && c.resolved_device() == DeviceKind::cpu) {
    table.fail("matmul", "\"fp8\" products run on CUDA GPUs with fp8 tensor cores only; on the CPU use "
                         "matmul = \"bf16\"");
  }
}

EngineConfig EngineConfig::from_toml(ConfigTable& table) { return engine_fields().read(table); }

void to_toml(const EngineConfig& c, ConfigWriter& out) { engine_fields().write(c, out); }

}  // namespace zest
