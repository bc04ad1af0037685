// `zest train` with [lora], end to end on the CPU: the run writes the adapters as diffusers loads them,
// its checkpoints record them, a resume reads the base again and continues, the exports fold them, and
// [lora] refuses what it cannot do yet.
#include "checkpoint/directory.h"
#include "common/keep_thread_count.h"
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "data/model_features.h"
#include "data/synth.h"
#include "engine/memory_model.h"
#include "lora_test_util.h"
#include "models/lora_run.h"
#include "formats/safetensors.h"
#include "models/common/lora.h"
#include "models/lora_file.h"
#include "models/model_export.h"
#include "pipelines/family_pipeline.h"
#include "pipelines/sample_run.h"
#include "train/run_config.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace zest::lora_test {
namespace {

namespace fs = std::filesystem;
using zest::testing::KeepThreadCount;
using zest::testing::read_text;
using zest::testing::TempDir;

RunConfig lora_run(const TempDir& dir, int64_t max_steps, const std::string& extra = "") {
  if (!fs::exists(fs::path(dir.sub("data")) / "dataset.json")) {
    SynthOptions synth;
    synth.samples = 8;
    synthesize_dataset(dir.sub("data"), builtin_model_features("unet_tiny"), synth);
  }
  ConfigTable table = ConfigTable::parse_string(
      "[model]\nname = \"unet_tiny\"\n[data]\ndir = \"" + dir.sub("data") +
          "\"\nbatch_size = 2\nnum_workers = 1\n[engine]\ndevice = \"cpu\"\nprecision = \"fp32\"\nstage = 2\n"
          "[optimizer]\nlr = 0.01\n[lora]\nrank = 2\nalpha = 4.0\n[train]\nmax_steps = " + std::to_string(max_steps) +
          "\nlog_every = 1\nrun_dir = \"" + dir.sub("run") + "\"\n[checkpoint]\nevery_steps = 1\n" + extra,
      "run.toml");
  return run_config_from_toml(table);
}

TEST(LoraTrainRun, WritesThePeftFileAndResumesWithItsBase) {
  const KeepThreadCount threads;
  TempDir dir("lora_run");
  run_training(lora_run(dir, 2), TrainOptions{});
  const std::string file = dir.sub("run") + "/" + kLoraFileName;
  ASSERT_TRUE(fs::exists(file));
  EXPECT_FALSE(fs::exists(dir.sub("run") + "/model.safetensors"));
  const safetensors::Reader lora(file);
  EXPECT_GT(lora.tensors().size(), 80u);  // 4 projections × 2 attentions × every transformer block, 2 factors
  for (const auto& t : lora.tensors()) EXPECT_EQ(t.name.rfind("unet.", 0), 0u) << t.name;
  EXPECT_TRUE(lora.metadata().count("lora_adapter_metadata"));
  const std::string checkpoints = dir.sub("run") + "/checkpoints";
  const LoraRecord record = lora_record_of_checkpoint(checkpoint::resolve_checkpoint(checkpoints));
  EXPECT_EQ(record.rank, 2);
  EXPECT_EQ(record.alpha, 4.0);
  EXPECT_EQ(record.layers.size() * 2, lora.tensors().size());

  // The resumed run continues from step 2 (the base built again from the seed, the adapters from the
  // checkpoint) and its adapters keep training.
  const TrainOutcome resumed = run_training(lora_run(dir, 3), TrainOptions{});
  EXPECT_EQ(resumed.final_step, 3);
  const safetensors::Reader after(file);
  const std::string b = "unet.mid_block.attentions.0.transformer_blocks.0.attn1.to_q.lora_B.weight";
  EXPECT_FALSE(after.read(b).equal(lora.read(b)));

  // Exports: the folded UNet folder diffusers' from_pretrained reads, and the adapters alone.
  const auto folded = export_checkpoint(checkpoints, dir.sub("unet"), {}, "diffusers");
  EXPECT_TRUE(fs::exists(dir.sub("unet") + "/diffusion_pytorch_model.safetensors"));
  EXPECT_TRUE(fs::exists(dir.sub("unet") + "/config.json"));
  EXPECT_GT(folded.tensors, 100);
  export_checkpoint(checkpoints, dir.sub("lora.safetensors"), {}, kLoraFormat);
  EXPECT_EQ(safetensors::Reader(dir.sub("lora.safetensors")).tensors().size(), lora.tensors().size());
}

// From a diffusers pipeline's UNet (the committed tiny SD1.5 pipeline), with validation samples drawn by
// the pipeline's UNet with the step's adapters: the second round's grid is what `zest sample --lora` draws
// with the run's final adapters (the first round's pipeline kept, its adapters' values replaced); the folded
// export reads the base from where the run did.
TEST(LoraTrainRun, FromAPretrainedPipelineWithValidationSamples) {
  const KeepThreadCount threads;
  TempDir dir("lora_pipeline");
  const std::string pipeline = std::string(ZEST_TEST_DATA) + "/sd_tiny/sd15";
  SynthOptions synth;
  synth.samples = 8;
  ConfigTable table = ConfigTable::parse_string(
      "[model]\npretrained = \"" + pipeline + "/unet\"\n[data]\ndir = \"" + dir.sub("data") +
          "\"\nbatch_size = 2\nnum_workers = 1\n[engine]\ndevice = \"cpu\"\nprecision = \"fp32\"\n[optimizer]\nlr = 0.05\n"
          "[lora]\nrank = 2\n[train]\nmax_steps = 4\nlog_every = 1\nrun_dir = \"" + dir.sub("run") +
          "\"\n[sample]\nevery_steps = 2\nprompts = [\"a red fox\"]\nsteps = 2\nsize = \"16x8\"\nnum_images = 1\n",
      "run.toml");
  const RunConfig config = run_config_from_toml(table);
  const ResolvedModel resolved = resolve_run_model(config);
  synthesize_dataset(dir.sub("data"), model_features(resolved), synth);
  run_training(config, TrainOptions{});
  const std::string first = dir.sub("run") + "/samples/step_00000002_prompt_0.png";
  const std::string second = dir.sub("run") + "/samples/step_00000004_prompt_0.png";
  ASSERT_TRUE(fs::exists(first) && fs::exists(second));
  ASSERT_TRUE(fs::exists(dir.sub("run") + "/" + kLoraFileName));
  EXPECT_TRUE(read_text(first) != read_text(second)) << "the adapters moved between the rounds: " << second;
  SampleOptions sample;
  sample.pretrained = pipeline;
  sample.lora = dir.sub("run") + "/" + kLoraFileName;
  sample.steps = 2;
  sample.size = "16x8";
  sample.prompt = "a red fox";
  sample.device = "cpu";
  sample.output = dir.sub("sampled.png");
  find_family_pipeline("unet")->sample(sample);
  EXPECT_TRUE(read_text(second) == read_text(sample.output)) << second << " differs from " << sample.output;
  export_checkpoint(dir.sub("run") + "/checkpoints", dir.sub("unet"), {}, "diffusers");
  EXPECT_TRUE(fs::exists(dir.sub("unet") + "/diffusion_pytorch_model.safetensors"));
}

TEST(LoraTrainRun, RefusesABadTarget) {
  const KeepThreadCount threads;
  TempDir dir("lora_refusals");
  const RunConfig config = lora_run(dir, 1);
  RunConfig bad = config;
  bad.lora.target_modules = {"to_qv"};
  try {
    run_training(bad, TrainOptions{});
    ADD_FAILURE() << "a target matching nothing was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target_modules entry \"to_qv\" matches no Linear or Conv layer"),
              std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(config.checkpoint.dir + "/latest"));
}

}  // namespace
}  // namespace zest::lora_test

namespace zest::lora_test {
namespace {

// `zest estimate` and the pre-flight check: the adapters are the trained parameters, the base is frozen
// compute-dtype bytes on every rank, counted from shapes alone (the meta device) as the real model has them.
TEST(LoraEstimate, CountsTheAdaptersAsTrainedAndTheBaseAsFrozen) {
  ConfigTable table = ConfigTable::parse_string(
      "[model]\nname = \"unet_tiny\"\n[data]\ndir = \"d\"\n[lora]\nrank = 2\ntarget_modules = [\"to_q\", \"conv1\"]\n",
      "run.toml");
  const RunConfig config = run_config_from_toml(table);
  const ParameterCounts counts = count_lora_parameters(resolve_run_model(config), config.lora);
  auto model = tiny_model("unet_tiny");
  attach_lora(*model, config.lora.target_modules, config.lora.shape(), "test");
  int64_t adapters = 0, base = 0;
  for (const auto& item : model->named_parameters())
    (is_adapter_parameter(item.key()) ? adapters : base) += item.value().numel();
  EXPECT_EQ(counts.trainable, adapters);
  EXPECT_EQ(counts.frozen, base);
  MemoryModelInputs in;
  in.numel = counts.trainable;
  in.frozen_numel = counts.frozen;
  in.world_size = 4;
  in.stage = 3;
  in.precision = Precision::bf16;
  const ModelStateBytes bytes = estimate_model_state_bytes(in);
  EXPECT_EQ(bytes.frozen, 2 * counts.frozen);  // whole on every rank, even at stage 3
  EXPECT_EQ(bytes.on_device() - bytes.frozen, estimate_model_state_bytes({counts.trainable, 4, 3, Precision::bf16}).on_device());
}

}  // namespace
}  // namespace zest::lora_test
