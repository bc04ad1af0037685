// EngineConfig, OptimConfig and SchedulerConfig from TOML: defaults, good values, and every rule's
// error message (location, key, what is wrong).
#include "tests/config/config_test_util.h"

#include "core/config_writer.h"
#include "engine/engine_config.h"
#include "optim/optim_config.h"

#include <gtest/gtest.h>

namespace zest {
namespace {

using test::expect_error;
using test::read_section;

EngineConfig engine(const std::string& body) { return read_section<EngineConfig>("[engine]\n" + body, "engine"); }
OptimConfig optimizer(const std::string& body) {
  return read_section<OptimConfig>("[optimizer]\n" + body, "optimizer");
}
SchedulerConfig scheduler(const std::string& body) {
  return read_section<SchedulerConfig>("[scheduler]\n" + body, "scheduler");
}

TEST(EngineConfigToml, EmptyTableGivesDefaults) {
  const EngineConfig c = engine("");
  const EngineConfig d;
  EXPECT_EQ(c.stage, d.stage);
  EXPECT_EQ(c.precision, Precision::bf16);
  EXPECT_EQ(c.reduce_dtype, Precision::fp32);
  EXPECT_EQ(c.accumulation_steps, 1);
  EXPECT_DOUBLE_EQ(c.bucket_mb, 25.0);
  EXPECT_EQ(c.activation_checkpointing, CheckpointPolicy::none);
  EXPECT_TRUE(c.cudnn_benchmark);
  EXPECT_EQ(to_dtype(c.precision), torch::kBFloat16);
}

TEST(EngineConfigToml, FullFp16Config) {
  const EngineConfig c = engine(R"(stage = 1
precision = "fp16"
reduce_dtype = "fp16"
accumulation_steps = 4
clip_norm = 1
bucket_mb = 50.5
activation_checkpointing = "every_k"
checkpoint_every = 3
max_nonfinite_steps = 2
threads = 8
cudnn_benchmark = false
[engine.loss_scale]
initial = 1024.0
window = 200
hysteresis = 2
min = 4
at_min = "warn"
)");
  EXPECT_EQ(c.stage, 1);
  EXPECT_EQ(c.precision, Precision::fp16);
  EXPECT_EQ(c.reduce_dtype, Precision::fp16);
  EXPECT_EQ(c.accumulation_steps, 4);
  EXPECT_DOUBLE_EQ(c.clip_norm, 1.0);
  EXPECT_DOUBLE_EQ(c.bucket_mb, 50.5);
  EXPECT_EQ(c.activation_checkpointing, CheckpointPolicy::every_k);
  EXPECT_EQ(c.checkpoint_every, 3);
  EXPECT_EQ(c.max_nonfinite_steps, 2);
  EXPECT_EQ(c.threads, 8);
  EXPECT_FALSE(c.cudnn_benchmark);
  EXPECT_DOUBLE_EQ(c.loss_scale.initial, 1024.0);
  EXPECT_EQ(c.loss_scale.window, 200);
  EXPECT_EQ(c.loss_scale.hysteresis, 2);
  EXPECT_DOUBLE_EQ(c.loss_scale.min, 4.0);
  EXPECT_EQ(c.loss_scale.at_min, AtMinScale::warn);

  // Printing and reading back gives the same config.
  ConfigWriter out;
  to_toml(c, out);
  const EngineConfig back = read_section<EngineConfig>(out.str(), "engine");
  EXPECT_EQ(back.checkpoint_every, 3);
  EXPECT_FALSE(back.cudnn_benchmark);
  EXPECT_DOUBLE_EQ(back.loss_scale.initial, 1024.0);
  EXPECT_EQ(back.loss_scale.at_min, AtMinScale::warn);
}

TEST(EngineConfigToml, StageRules) {
  expect_error([] { engine("stage = 4\n"); }, {"cfg.toml:2:9: engine.stage: must be 0, 1, 2 or 3 (got 4)"});
  expect_error([] { engine("stage = -1\n"); }, {"engine.stage: must be 0, 1, 2 or 3 (got -1)"});
  expect_error([] { engine("stage = 2\nprefetch = 2\n"); }, {"engine.prefetch: is only used with stage = 3 (stage is 2)"});
  expect_error([] { engine("stage = 3\nprefetch = 17\n"); }, {"engine.prefetch: must be between 0 and 16"});
  const EngineConfig s3 = engine("stage = 3\nreshard_after_forward = false\nprefetch = 2\n");
  EXPECT_EQ(s3.stage, 3);
  EXPECT_FALSE(s3.reshard_after_forward);
  EXPECT_EQ(s3.prefetch, 2);
  expect_error([] { engine("stage = \"2\"\n"); }, {"cfg.toml:2:9: engine.stage: expected an integer, got a string"});
}

TEST(EngineConfigToml, OptimizerOffload) {
  const EngineConfig off = engine("stage = 3\n[engine.offload]\noptimizer = \"cpu\"\n");
  EXPECT_EQ(off.offload_optimizer, OffloadTarget::cpu);
  EXPECT_EQ(engine("stage = 2\n").offload_optimizer, OffloadTarget::none);
  ConfigWriter out;
  to_toml(off, out);
  EXPECT_EQ(read_section<EngineConfig>(out.str(), "engine").offload_optimizer, OffloadTarget::cpu);
  expect_error([] { engine("stage = 0\n[engine.offload]\noptimizer = \"cpu\"\n"); },
               {"cfg.toml:4:13: engine.offload.optimizer: offloading the optimizer needs engine.stage = 1, 2 or 3"});
  expect_error([] { engine("[engine.offload]\noptimizer = \"nvme\"\n"); },
               {"engine.offload.optimizer: \"nvme\" is not one of \"none\", \"cpu\""});
  expect_error([] { engine("[engine.offload]\ndevice = \"cpu\"\n"); },
               {"engine.offload.device: unknown key", "optimizer = \"cpu\""});
  // The staging ring's size: written back, positive, and only with the optimizer offloaded.
  EXPECT_EQ(off.offload_staging_mb, 256.0);
  const EngineConfig small = engine("stage = 2\n[engine.offload]\noptimizer = \"cpu\"\nstaging_mb = 64.0\n");
  EXPECT_EQ(small.offload_staging_mb, 64.0);
  ConfigWriter small_out;
  to_toml(small, small_out);
  EXPECT_EQ(read_section<EngineConfig>(small_out.str(), "engine").offload_staging_mb, 64.0);
  expect_error([] { engine("[engine.offload]\noptimizer = \"cpu\"\nstaging_mb = 0.0\n"); },
               {"cfg.toml:4:14: engine.offload.staging_mb: must be > 0 (MiB)"});
  expect_error([] { engine("[engine.offload]\nstaging_mb = 64.0\n"); },
               {"engine.offload.staging_mb: is only used with optimizer = \"cpu\""});
  expect_error([] { engine("[engine.offload]\noptimizer = \"cpu\"\nbuffer_count = 4\n"); },
               {"engine.offload.buffer_count: unknown key", "staging_mb"});
}

TEST(EngineConfigToml, RangeErrors) {
  expect_error([] { engine("accumulation_steps = 0\n"); }, {"cfg.toml:2:22: engine.accumulation_steps: must be >= 1"});
  expect_error([] { engine("clip_norm = -1.0\n"); }, {"engine.clip_norm: must be >= 0"});
  expect_error([] { engine("bucket_mb = 0\n"); }, {"engine.bucket_mb: must be > 0"});
  expect_error([] { engine("threads = -2\n"); }, {"engine.threads: must be between 0 and 1024"});
  // Ten thousand intra-op threads stalled a run: the bound says what fits and names the core count.
  expect_error([] { engine("threads = 1000000\n"); }, {"engine.threads: must be between 0 and 1024", "cores"});
  EXPECT_EQ(engine("threads = 1024\n").threads, 1024);
  expect_error([] { engine("max_nonfinite_steps = 0\n"); }, {"engine.max_nonfinite_steps: must be >= 1"});
}

TEST(EngineConfigToml, EnumErrorsListAllowedValues) {
  expect_error([] { engine("precision = \"fp8\"\n"); },
               {"engine.precision: \"fp8\" is not one of \"fp32\", \"bf16\", \"fp16\""});
  expect_error([] { engine("activation_checkpointing = \"some\"\n"); },
               {"engine.activation_checkpointing: \"some\" is not one of \"none\", \"all\", \"every_k\""});
}

TEST(EngineConfigToml, CheckpointEveryNeedsEveryK) {
  expect_error([] { engine("checkpoint_every = 2\n"); },
               {"engine.checkpoint_every: is only used with activation_checkpointing = \"every_k\" (it is \"none\")"});
  expect_error([] { engine("activation_checkpointing = \"every_k\"\ncheckpoint_every = 0\n"); },
               {"engine.checkpoint_every: must be >= 1"});
}

TEST(EngineConfigToml, LossScaleOnlyWithFp16) {
  expect_error([] { engine("precision = \"bf16\"\n[engine.loss_scale]\nwindow = 10\n"); },
               {"cfg.toml:3:1: engine.loss_scale: [engine.loss_scale] is only used with precision = \"fp16\" "
                "(precision is \"bf16\")"});
  expect_error([] { engine("precision = \"fp16\"\n[engine.loss_scale]\ninitial = 8.0\nmin = 16.0\n"); },
               {"cfg.toml:5:7: engine.loss_scale.min: must be <= initial (16.0 > 8.0)"});
  expect_error([] { engine("precision = \"fp16\"\nloss_scale.window = 0\n"); }, {"engine.loss_scale.window: must be >= 1"});
  expect_error([] { engine("precision = \"fp16\"\nloss_scale.at_min = \"abort\"\n"); },
               {"engine.loss_scale.at_min: \"abort\" is not one of \"warn\", \"error\""});
}

// [engine] matmul: bf16 by default, fp8 read as such, and fp8 only over bf16 compute.
TEST(EngineConfigToml, MatmulPrecision) {
  EXPECT_EQ(engine("").matmul, MatmulPrecision::bf16);
  EXPECT_EQ(engine("matmul = \"fp8\"\n").matmul, MatmulPrecision::fp8);
  EXPECT_EQ(engine("precision = \"bf16\"\nmatmul = \"fp8\"\n").matmul, MatmulPrecision::fp8);
  expect_error([] { engine("precision = \"fp16\"\nmatmul = \"fp8\"\n"); },
               {"cfg.toml:3:10: engine.matmul: \"fp8\" needs precision = \"bf16\" (precision is \"fp16\")"});
  expect_error([] { engine("precision = \"fp32\"\nmatmul = \"fp8\"\n"); }, {"(precision is \"fp32\")"});
  expect_error([] { engine("matmul = \"fp4\"\n"); }, {"engine.matmul: \"fp4\" is not one of \"bf16\", \"fp8\""});
}

// [engine] optimizer_in_backward: off by default, and refused with what needs the whole step's gradients.
TEST(EngineConfigToml, OptimizerInBackward) {
  EXPECT_FALSE(engine("").optimizer_in_backward);
  EXPECT_TRUE(engine("optimizer_in_backward = true\nstage = 3\n").optimizer_in_backward);
  expect_error([] { engine("optimizer_in_backward = true\nclip_norm = 1.0\n"); },
               {"cfg.toml:2:25: engine.optimizer_in_backward: needs clip_norm = 0"});
  expect_error([] { engine("optimizer_in_backward = true\nprecision = \"fp16\"\n"); },
               {"engine.optimizer_in_backward: does not go with precision = \"fp16\""});
  expect_error([] { engine("optimizer_in_backward = true\n[engine.offload]\noptimizer = \"cpu\"\n"); },
               {"engine.optimizer_in_backward: does not go with [engine.offload] optimizer = \"cpu\""});
}

TEST(EngineConfigToml, UnknownKeysSuggestOrTranslateDeepSpeed) {
  expect_error([] { engine("stgae = 1\n"); }, {"cfg.toml:2:1: engine.stgae: unknown key (did you mean 'stage'?)"});
  expect_error([] { engine("gradient_accumulation_steps = 4\n"); },
               {"engine.gradient_accumulation_steps: unknown key (zest calls it accumulation_steps)"});
  expect_error([] { engine("benchmark = true\n"); }, {"engine.benchmark: unknown key (zest calls it cudnn_benchmark)"});
  expect_error([] { engine("precision = \"fp16\"\n[engine.loss_scale]\ninitial_scale_power = 16\n"); },
               {"engine.loss_scale.initial_scale_power: unknown key (zest takes the scale itself"});
  expect_error([] { engine("[engine.loss_scail]\n"); },
               {"[engine.loss_scail]: unknown section (did you mean [engine.loss_scale]?)"});
}

TEST(OptimConfigToml, DefaultsAndGoodValues) {
  const OptimConfig d = optimizer("");
  EXPECT_EQ(d.name, OptimizerKind::adamw);
  EXPECT_DOUBLE_EQ(d.lr, 1e-4);
  EXPECT_EQ(d.no_decay, (std::vector<std::string>{"bias", "norm"}));
  const OptimConfig c = optimizer("lr = 3e-4\nbetas = [0.9, 0.95]\neps = 1e-6\nweight_decay = 0\nno_decay = [\"bias\"]\n");
  EXPECT_DOUBLE_EQ(c.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.weight_decay, 0.0);
  EXPECT_EQ(c.no_decay, (std::vector<std::string>{"bias"}));
  const OptimConfig sgd = optimizer("name = \"sgd\"\nlr = 0.1\nmomentum = 0.8\nnesterov = true\n");
  EXPECT_EQ(sgd.name, OptimizerKind::sgd);
  EXPECT_DOUBLE_EQ(sgd.momentum, 0.8);
  EXPECT_TRUE(sgd.nesterov);
}

// Lion (optim/lion.h): its own default betas, weight decay, and only the keys its rule declares.
TEST(OptimConfigToml, Lion) {
  const OptimConfig d = optimizer("name = \"lion\"\n");
  EXPECT_EQ(d.name, OptimizerKind::lion);
  EXPECT_DOUBLE_EQ(d.beta1, 0.9);
  EXPECT_DOUBLE_EQ(d.beta2, 0.99);
  const OptimConfig c = optimizer("name = \"lion\"\nlr = 3e-5\nbetas = [0.95, 0.98]\nweight_decay = 0.5\n");
  EXPECT_DOUBLE_EQ(c.lr, 3e-5);
  EXPECT_DOUBLE_EQ(c.beta1, 0.95);
  EXPECT_DOUBLE_EQ(c.beta2, 0.98);
  EXPECT_DOUBLE_EQ(c.weight_decay, 0.5);
  EXPECT_DOUBLE_EQ(optimizer("").beta2, 0.999);  // AdamW keeps its own default
  expect_error([] { optimizer("name = \"lion\"\neps = 1e-6\n"); },
               {"optimizer.eps: is only used by optimizer \"adamw\" (name is \"lion\")"});
  expect_error([] { optimizer("name = \"lion\"\nmomentum = 0.9\n"); },
               {"optimizer.momentum: is only used by optimizer \"sgd\" (name is \"lion\")"});
  // Printed and read back: the same settings, and only Lion's keys.
  ConfigWriter out;
  to_toml(c, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("name = \"lion\""), std::string::npos) << text;
  EXPECT_EQ(text.find("eps ="), std::string::npos) << text;
  EXPECT_EQ(text.find("momentum ="), std::string::npos) << text;
  const OptimConfig back = read_section<OptimConfig>(text, "optimizer");
  EXPECT_EQ(back.name, OptimizerKind::lion);
  EXPECT_DOUBLE_EQ(back.beta1, 0.95);
  EXPECT_DOUBLE_EQ(back.beta2, 0.98);
  EXPECT_DOUBLE_EQ(back.weight_decay, 0.5);
}

TEST(OptimConfigToml, Errors) {
  expect_error([] { optimizer("betas = [0.9]\n"); },
               {"cfg.toml:2:9: optimizer.betas: must have exactly 2 values [beta1, beta2] (got 1)"});
  expect_error([] { optimizer("betas = [0.9, 1.0]\n"); }, {"optimizer.betas: each beta must be in [0, 1) (got 1.0)"});
  expect_error([] { optimizer("betas = 0.9\n"); }, {"optimizer.betas: expected an array of numbers, got a float"});
  expect_error([] { optimizer("lr = 0\n"); }, {"optimizer.lr: must be > 0"});
  expect_error([] { optimizer("momentum = 0.9\n"); },
               {"cfg.toml:2:12: optimizer.momentum: is only used by optimizer \"sgd\" (name is \"adamw\")"});
  expect_error([] { optimizer("name = \"sgd\"\nbetas = [0.9, 0.99]\n"); },
               {"optimizer.betas: is only used by optimizer \"adamw\" or \"lion\" (name is \"sgd\")"});
  expect_error([] { optimizer("name = \"sgd\"\neps = 1e-6\n"); },
               {"optimizer.eps: is only used by optimizer \"adamw\" (name is \"sgd\")"});
  expect_error([] { optimizer("name = \"adam\"\n"); },
               {"\"adam\" is not one of \"adamw\", \"sgd\", \"lion\" (did you mean \"adamw\"?)"});
  expect_error([] { optimizer("no_decay = [\"bias\", 3]\n"); },
               {"optimizer.no_decay[1]: expected a string, got an integer (3)"});
  expect_error([] { optimizer("name = \"sgd\"\nmomentum = 0\nnesterov = true\n"); },
               {"optimizer.nesterov: needs momentum > 0"});
  expect_error([] { optimizer("[optimizer.params]\nlr = 1\n"); }, {"[optimizer.params]: unknown section (zest reads lr"});
}

TEST(SchedulerConfigToml, GoodAndBad) {
  const SchedulerConfig c = scheduler("name = \"cosine\"\nwarmup_steps = 10\ndecay_steps = 90\nmin_lr = 1e-6\n");
  EXPECT_EQ(c.name, ScheduleKind::cosine);
  EXPECT_EQ(c.warmup_steps, 10);
  EXPECT_EQ(c.decay_steps, 90);
  EXPECT_DOUBLE_EQ(c.min_lr, 1e-6);
  expect_error([] { scheduler("warmup_steps = -1\n"); }, {"scheduler.warmup_steps: must be >= 0"});
  expect_error([] { scheduler("decay_steps = 5\n"); },
               {"scheduler.decay_steps: is only used by the cosine and linear schedules"});
  expect_error([] { scheduler("name = \"cosin\"\n"); }, {"(did you mean \"cosine\"?)"});
  expect_error([] { scheduler("warmup_num_steps = 5\n"); }, {"unknown key (zest calls it warmup_steps)"});
}

TEST(OptimConfig, NoDecayMatchesComponentsOfTheName) {
  const std::vector<std::string> patterns = {"bias", "norm"};
  EXPECT_TRUE(no_decay_matches(patterns, "to_out.0.bias"));
  EXPECT_TRUE(no_decay_matches(patterns, "down_blocks.0.norm1.weight"));
  EXPECT_TRUE(no_decay_matches(patterns, "attn.q_norm.weight"));
  EXPECT_FALSE(no_decay_matches(patterns, "to_q.weight"));
  EXPECT_FALSE(no_decay_matches({"to_q.weight"}, "to_q.weight"));  // a pattern never spans a dot
  EXPECT_FALSE(no_decay_matches({}, "x.bias"));
}

}  // namespace
}  // namespace zest
