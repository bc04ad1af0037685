// The files of the GPU machine's check that diffusers loads zest's LoRA file (tests/gpu/lora_diffusers_check.py):
// a tiny diffusers UNet folder (unet_tiny's configuration, zest's seeded weights under diffusers' names), a
// trained LoRA file as `zest merge --format lora` writes it, fixed inputs, and zest's UNet output with the
// adapters. Written to $ZEST_LORA_ARTIFACTS when set (kept there for the script), else to a temporary folder;
// the test checks what it can without diffusers: every file reads back and gives zest's output again.
#include "checkpoint/save.h"
#include "comm/self_communicator.h"
#include "engine/engine.h"
#include "formats/config_json.h"
#include "formats/safetensors.h"
#include "lora_test_util.h"
#include "models/lora_file.h"
#include "models/model_export.h"
#include "models/pretrained_load.h"
#include "models/pretrained_source.h"
#include "models/pretrained_weights.h"
#include "models/unet/diffusers_folder.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace zest::lora_test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFlavor = "unet_tiny";

void write_base_folder(UnitModule& model, const fs::path& folder) {
  fs::create_directories(folder);
  safetensors::NamedTensors tensors;
  for (const auto& item : model.named_parameters()) tensors.emplace_back(item.key(), item.value().detach().contiguous());
  safetensors::save_file((folder / "diffusion_pytorch_model.safetensors").string(), tensors, {{"format", "pt"}});
  const std::string config = unet::diffusers_folder_format().write_config(
      toml_to_json(builtin_model_config(kFlavor).toml_text, kFlavor));
  std::ofstream(folder / "config.json") << config;
}

// Trains the adapters a few steps through the engine (so the file is a real run's), saves the checkpoint.
void train_and_save(const fs::path& checkpoint_dir, const LoraRecord& record, std::shared_ptr<UnitModule> model,
                    const TensorMap& inputs) {
  EngineConfig e;
  e.stage = 2;
  e.device = DeviceKind::cpu;
  e.precision = Precision::fp32;
  OptimConfig o;
  o.lr = 0.05;
  Engine engine(model, e, o, SchedulerConfig{}, std::make_shared<SelfCommunicator>());
  for (int step = 0; step < 3; ++step) {
    engine.backward((forward(kFlavor, *model, inputs) - 1.0).square().mean());
    engine.step();
  }
  checkpoint::SaveRequest request;
  request.dir = checkpoint_dir.string();
  request.model_name = kFlavor;
  request.model_config = builtin_model_config(kFlavor).toml_text;
  request.extra_json = nlohmann::json{{"lora", record.to_json()}, {"model_source", {{"family", "unet"}, {"format", "zest"}}}}.dump();
  checkpoint::Saver saver;
  saver.save(engine, request);
  saver.wait(engine.comm());
}

TEST(LoraDiffusersArtifacts, WritesTheGpuChecksFiles) {
  const char* kept = std::getenv("ZEST_LORA_ARTIFACTS");
  const fs::path out = kept ? fs::path(kept) : fs::temp_directory_path() / "zest_lora_artifacts";
  fs::remove_all(out / "checkpoints");
  fs::create_directories(out);
  auto model = tiny_model(kFlavor, /*seed=*/3);
  write_base_folder(*model, out / "base");
  const TensorMap inputs = fixed_inputs(kFlavor, *model, 2, 1);
  // The default targets plus a feed-forward Linear and a convolution: the options diffusers users set too.
  const std::vector<std::string> targets{"to_q", "to_k", "to_v", "to_out.0", "ff.net.2", "conv1"};
  LoraRecord record{4, 8.0, 0.0, {}, (out / "base").string(), 3};
  record.layers = attach_lora(*model, targets, {record.rank, record.alpha, 0.0}, "test");
  freeze_all_but_adapters(*model);
  train_and_save(out / "checkpoints", record, model, inputs);
  export_checkpoint((out / "checkpoints").string(), (out / "lora").string(), {}, kLoraFormat);

  torch::NoGradGuard no_grad;
  model->eval();
  const torch::Tensor output = forward(kFlavor, *model, inputs).detach();
  safetensors::NamedTensors saved_inputs(inputs.begin(), inputs.end());
  safetensors::save_file((out / "inputs.safetensors").string(), saved_inputs);
  safetensors::save_file((out / "zest_output.safetensors").string(), {{"output", output}});

  // What the script will do, with zest: the base folder read as a pretrained folder, the file loaded on it.
  auto fresh = tiny_model(kFlavor, /*seed=*/17);
  const auto weights = PretrainedWeights::open(find_pretrained_layout((out / "base").string()));
  load_pretrained_weights(*fresh, *weights, /*strict=*/true);
  const LoadedLora loaded = load_lora(*fresh, "unet", (out / "lora").string(), 1.0);
  EXPECT_EQ(loaded.layers, static_cast<int64_t>(record.layers.size()));
  fresh->eval();
  EXPECT_LE((forward(kFlavor, *fresh, inputs) - output).abs().max().item<double>(), 1e-6);
  // The convolutions and feed-forward layers are in.
  EXPECT_TRUE(std::any_of(record.layers.begin(), record.layers.end(),
                          [](const std::string& name) { return name.find("conv1") != std::string::npos; }));
  if (!kept) fs::remove_all(out);
}

}  // namespace
}  // namespace zest::lora_test
