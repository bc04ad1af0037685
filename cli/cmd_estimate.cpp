// `zest estimate`: per-rank model-state memory of every ZeRO stage, from a parameter count or a run
// file's model, with the same formula the engine's own accounting is tested against.
#include "cli/commands.h"

#include "core/check.h"
#include "core/number_text.h"
#include "data/dataset.h"
#include "data/model_features.h"
#include "engine/memory_model.h"
#include "engine/sharding_policy.h"
#include "models/lora_run.h"
#include "models/model_resolve.h"
#include "optim/optimizer.h"
#include "train/activation_check.h"
#include "train/run_config.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

namespace zest::cli {
namespace {

// The formula takes at most 20 bytes per parameter, so int64 byte counts are exact far beyond this
// (10^15 parameters is a thousand times the largest models trained today).
constexpr double kMaxParams = 1e15;
constexpr int kMaxWorld = 1'000'000;

struct EstimateArgs {
  std::string params;  // text, so that 1e9 and 7000000000 both read, and absurd values get a clear refusal
  std::string config_path;
  int world = 1;
  std::string precision = "bf16";
  std::string reduce_dtype;  // default: same as precision (the ZeRO paper's accounting)
  std::string optimizer = "adamw";
  bool ema = false;  // with --config: the run file's [ema]
};

Precision parse_precision(const std::string& text, const char* flag) {
  if (const std::optional<Precision> p = precision_named(text)) return *p;
  throw Error(str(flag, " must be bf16, fp16 or fp32, got '", text, "'"));
}

// The optimizers' names come from their descriptions (optim/optimizers.h).
std::string optimizer_names(const char* separator) {
  std::string names;
  for (const OptimizerSpec& spec : optimizer_specs()) names += (names.empty() ? "" : separator) + spec.name;
  return names;
}

OptimizerKind parse_optimizer(const std::string& text) {
  for (const OptimizerSpec& spec : optimizer_specs())
    if (spec.name == text) return spec.kind;
  throw Error("--optimizer must be one of " + optimizer_names(", ") + ", got '" + text + "'");
}

std::string format_count(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// --params as a whole number of parameters in [1, kMaxParams]; "1e9", "1.5e9" and "7000000000" all read.
int64_t parse_params(const std::string& text) {
  const std::optional<double> number = number_in(text);
  if (!number) throw Error("--params must be a number of parameters (e.g. 1.3e9), got '" + text + "'");
  const double value = *number;
  if (value < 1 || value > kMaxParams || value != std::floor(value))
    throw Error("--params must be a whole number between 1 and 1e15, got " + text);
  return static_cast<int64_t>(value);
}

// "360 frames, 128 text tokens" or "64x64 latents, 77 text tokens"; a 0 (the family's default) is "default".
std::string describe_shapes(const ActivationShapes& shapes, DatasetFormat format) {
  const std::string tokens = shapes.text_tokens > 0 ? std::to_string(shapes.text_tokens) : std::string("default");
  return dataset_format_spec(format).describe_size(shapes.length, shapes.width) + ", " + tokens + " text tokens";
}

// The activations of the run file's micro-batch, for the data's shapes (its dataset's first sample, or
// the family's defaults when data.dir holds none yet), under its policy and with every unit checkpointed.
void print_activations(const RunConfig& run, const ResolvedModel& model, const MemoryModelInputs& state) {
  const torch::Device device(run.engine.resolved_device() == DeviceKind::cuda ? torch::kCUDA : torch::kCPU);
  ActivationShapes shapes = default_activation_shapes(run.engine.precision, device);
  // Without a dataset, data.seq_len stands for the frames (motion) or the latent side (images), as in
  // `zest bench`; the rest are the family's defaults.
  shapes.length = run.data.seq_len;
  std::string shapes_from = "data.seq_len and the family's default shapes (data.dir '" + run.data.dir +
                            "' holds no dataset)";
  if (!run.data.dir.empty() && std::filesystem::is_regular_file(std::filesystem::path(run.data.dir) / "dataset.json")) {
    DatasetOptions options;
    options.seq_len = run.data.seq_len;
    try {
      shapes = activation_shapes_of(open_dataset(run.data.dir, options)->get(0, 0), run.engine.precision, device);
      shapes_from = "the shapes of " + run.data.dir;
    } catch (const std::exception& e) {
      shapes_from = "the family's default shapes (data.dir '" + run.data.dir + "' cannot be read: " + e.what() + ")";
    }
  }
  const ActivationPlan plan = activation_plan(run, model, shapes);
  if (plan.profile.units.empty()) return;
  std::printf("activations per rank and micro-batch (data.batch_size = %d, %s, %s, %s attention), from %s:\n",
              run.data.batch_size, to_string(run.engine.precision),
              describe_shapes(shapes, model_features(model).format).c_str(),
              shapes.attention_keeps_probabilities ? "math-path" : "fused GPU", shapes_from.c_str());
  const auto line = [&](CheckpointPolicy policy) {
    MemoryModelInputs in = state;
    in.stage = run.engine.stage;
    const int64_t activations = plan.bytes_with(plan.batch_size, policy);
    std::printf("  activation_checkpointing = \"%s\": %.3f GB; with the model state of stage %d: %.3f GB\n",
                to_string(policy), activations / 1e9, in.stage,
                (activations + estimate_model_state_bytes(in).on_device()) / 1e9);
  };
  line(plan.policy);
  if (plan.policy != CheckpointPolicy::all) line(CheckpointPolicy::all);
}

void run_estimate(const EstimateArgs& args) {
  if (args.world < 1 || args.world > kMaxWorld)
    throw Error("--world must be between 1 and " + std::to_string(kMaxWorld) + " ranks, got " + std::to_string(args.world));
  if (args.params.empty() == args.config_path.empty()) throw Error("give exactly one of --params P or --config RUN.toml");
  int64_t params = args.params.empty() ? 0 : parse_params(args.params);
  std::string source = "--params";
  MemoryModelInputs in;
  in.precision = parse_precision(args.precision, "--precision");
  in.ema = args.ema;
  in.reduce_dtype = args.reduce_dtype.empty() ? in.precision : parse_precision(args.reduce_dtype, "--reduce-dtype");
  OptimConfig optim;
  optim.name = parse_optimizer(args.optimizer);
  std::optional<RunConfig> run_file;
  std::optional<ResolvedModel> run_model;
  if (!args.config_path.empty()) {
    const RunConfig& run = run_file.emplace(parse_run_config(args.config_path));
    const ResolvedModel& model = run_model.emplace(resolve_run_model(run));
    // A LoRA run trains its adapters; its frozen base is kept whole in the compute dtype on every rank.
    const ParameterCounts counts =
        run.lora.enabled ? count_lora_parameters(model, run.lora) : ParameterCounts{count_model_parameters(model), 0};
    params = counts.trainable;
    in.frozen_numel = counts.frozen;
    source = model.description + (run.lora.enabled ? ", LoRA adapters" : "");
    in.ema = in.ema || run.ema.enabled;
    // The run file's own dtypes and optimizer: the estimate is of that run.
    in.precision = run.engine.precision;
    in.reduce_dtype = run.engine.reduce_dtype;
    in.offload_staging_bytes = run.engine.offload_staging_bytes();
    in.optimizer_in_backward = run.engine.optimizer_in_backward;
    optim = run.optimizer;
  }
  in.numel = params;
  in.world_size = args.world;
  in.optimizer_bytes_per_element = optimizer_state_bytes_per_element(optim);
  std::printf("model state per rank: %s parameters (%s), %d rank(s), %s compute, %s gradient shards, %s%s%s\n",
              format_count(params).c_str(), source.c_str(), args.world, to_string(in.precision),
              to_string(in.reduce_dtype), to_string(optim.name), in.ema ? ", fp32 EMA" : "",
              in.optimizer_in_backward ? ", optimizer in backward (per-step gradients freed bucket by bucket)" : "");
  if (in.frozen_numel > 0)
    std::printf("frozen base: %s parameters, %.3f GB in %s on every rank at every stage (in the totals)\n",
                format_count(in.frozen_numel).c_str(), in.frozen_numel * dtype_bytes(in.precision) / 1e9,
                to_string(in.precision));
  std::printf("%-6s %12s %12s %12s %12s %12s %12s %12s %16s %16s\n", "stage", "params GB", "grads GB",
              "master GB", "optim GB", "ema GB", "total GB", "total GiB", "offload: GPU GB", "offload: host GB");
  for (int stage = 0; stage <= ShardingPolicy::kMaxStage; ++stage) {
    in.stage = stage;
    const ModelStateBytes b = estimate_model_state_bytes(in);
    ZEST_CHECK(b.params >= 0 && b.grads >= 0 && b.master >= 0 && b.optimizer >= 0 && b.ema >= 0 &&
                   b.total() >= b.params,
               "estimate overflowed for ", params, " parameters");  // unreachable within kMaxParams
    std::printf("%-6d %12.3f %12.3f %12.3f %12.3f %12.3f %12.3f %12.3f", stage, b.params / 1e9, b.grads / 1e9,
                b.master / 1e9, b.optimizer / 1e9, b.ema / 1e9, b.total() / 1e9, b.total() / 1073741824.0);
    if (!ShardingPolicy::for_stage(stage, args.world).can_offload_optimizer()) {
      std::printf(" %16s %16s\n", "-", "-");
      continue;
    }
    MemoryModelInputs offloaded = in;
    offloaded.offload_optimizer = true;
    const ModelStateBytes o = estimate_model_state_bytes(offloaded);
    std::printf(" %16.3f %16.3f\n", o.on_device() / 1e9, o.on_host() / 1e9);
  }
  std::printf("(GB = 1e9 bytes as in the ZeRO paper; activations, gradient buckets in flight and stage 3's "
              "gathered buckets come on top. Offload ([engine.offload] optimizer = \"cpu\", stages 1-3): master, "
              "optimizer state and EMA in host memory, plus a page-locked staging ring, [engine.offload] staging_mb)\n");
  if (run_file) print_activations(*run_file, *run_model, in);
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto args = std::make_shared<EstimateArgs>();
  CLI::App* cmd = app.add_subcommand("estimate", "Per-rank model-state memory of every ZeRO stage");
  cmd->add_option("--params", args->params, "number of parameters P (e.g. 1.3e9; at most 1e15)");
  cmd->add_option("--config", args->config_path,
                  "run file: P from its [model]; precision, reduce dtype, optimizer and [ema] from the file too");
  cmd->add_option("--world", args->world, "number of ranks N")->required();
  cmd->add_option("--precision", args->precision, "compute dtype: bf16 | fp16 | fp32")->capture_default_str();
  cmd->add_option("--reduce-dtype", args->reduce_dtype, "dtype of sharded gradients (default: the precision)");
  cmd->add_option("--optimizer", args->optimizer, optimizer_names(" | "))->capture_default_str();
  cmd->add_flag("--ema", args->ema, "add an fp32 EMA of the weights (on by itself when the run file has [ema])");
  cmd->callback([args] { run_estimate(*args); });
}

}  // namespace zest::cli
