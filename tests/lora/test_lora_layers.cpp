// LoRA at the layer seam and in files: step 0 equals the base model, folding equals the adapters' output,
// the [lora] table's checks, every refusal of bad input (one message each), and the exported file as
// peft/diffusers name it, loaded back onto a fresh base.
#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "checkpoint/save.h"
#include "comm/self_communicator.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "engine/engine.h"
#include "formats/safetensors.h"
#include "lora_test_util.h"
#include "models/lora_file.h"
#include "models/model_export.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

namespace zest::lora_test {
namespace {

namespace fs = std::filesystem;

// Every kind of layer the seam has: attention projections, the feed-forward (recomputed GEGLU / GELU
// forms), the single block's split and joined products, 3×3 and 1×1 convolutions.
std::vector<std::string> every_kind_of_target(const std::string& flavor) {
  if (flavor == "unet_tiny")
    return {"to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2", "conv1", "conv_shortcut", "proj_in"};
  return {"linear1", "linear2", "motion_qkv", "text_out_proj", "fc1", "fc2", "self_attn_qkv"};
}

void randomize_adapters(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters())
    if (is_adapter_parameter(item.key())) item.value().normal_(0.0, 0.2);
}

class LoraLayers : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraLayers, StepZeroEqualsTheBaseModel) {
  const std::string flavor = GetParam();
  auto model = tiny_model(flavor);
  const TensorMap inputs = fixed_inputs(flavor, *model, 2, 1);
  const torch::Tensor base = forward(flavor, *model, inputs).detach();
  const auto names = attach_lora(*model, every_kind_of_target(flavor), {4, 8.0, 0.0}, "test");
  EXPECT_GT(names.size(), 4u);
  EXPECT_TRUE(forward(flavor, *model, inputs).detach().equal(base));  // B = 0: bit-equal
  // peft's init: A uniform in ±1/√in (kaiming_uniform_(a=√5)), B zero.
  for (const auto& [name, value] : adapters_of(*model)) {
    if (name.find("lora_B") != std::string::npos) {
      EXPECT_EQ(value.abs().max().item<double>(), 0.0) << name;
    } else {
      const double fan_in = static_cast<double>(value[0].numel());
      EXPECT_LE(value.abs().max().item<double>(), 1.0 / std::sqrt(fan_in) + 1e-7) << name;
      EXPECT_GT(value.abs().max().item<double>(), 0.0) << name;
    }
  }
}

TEST_P(LoraLayers, FoldingEqualsTheAdaptersOutput) {
  const std::string flavor = GetParam();
  auto model = tiny_model(flavor);
  const TensorMap inputs = fixed_inputs(flavor, *model, 2, 1);
  const torch::Tensor base = forward(flavor, *model, inputs).detach();
  attach_lora(*model, every_kind_of_target(flavor), {2, 3.0, 0.0}, "test");
  randomize_adapters(*model);
  const torch::Tensor adapted = forward(flavor, *model, inputs).detach();
  ASSERT_GT((adapted - base).abs().max().item<double>(), 1e-3);  // the adapters do something
  const auto base_weights = base_of(*model);
  fold_adapters(*model);
  // peft's scale: W' = W + (alpha/rank)·B·A = W + 1.5·B·A here.
  for (const AdaptableLayer& layer : adaptable_layers(*model)) {
    if (layer.adapter() == nullptr || layer.is_conv) continue;
    const auto& a = layer.adapter()->down();
    const auto& b = layer.adapter()->up();
    const auto folded = base_of(*model).at(layer.name + ".weight");
    EXPECT_TRUE(torch::allclose(folded - base_weights.at(layer.name + ".weight"), 1.5 * torch::matmul(b, a), 1e-5, 1e-6))
        << layer.name;
    break;
  }
  // A model without adapters, holding the folded weights: W + (alpha/r)·B·A alone gives the same output.
  auto plain = tiny_model(flavor);
  {
    torch::NoGradGuard no_grad;
    const auto folded = base_of(*model);
    for (auto& item : plain->named_parameters()) item.value().copy_(folded.at(item.key()));
  }
  const torch::Tensor refolded = forward(flavor, *plain, inputs).detach();
  const double scale = adapted.abs().max().item<double>();
  EXPECT_LE((refolded - adapted).abs().max().item<double>(), 1e-5 * scale);
  EXPECT_LE((forward(flavor, *model, inputs).detach() - adapted).abs().max().item<double>(), 1e-5 * scale);
}

INSTANTIATE_TEST_SUITE_P(Families, LoraLayers, ::testing::Values("unet_tiny", "hymotion_tiny"));

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoraInputs, TargetMatchingNothingIsOneMessage) {
  auto model = tiny_model("unet_tiny");
  const std::string message =
      error_of([&] { attach_lora(*model, {"to_q", "to_qq"}, {2, 2.0, 0.0}, "[lora] target_modules"); });
  EXPECT_NE(message.find("[lora] target_modules: target_modules entry \"to_qq\" matches no Linear or Conv layer"),
            std::string::npos) << message;
  EXPECT_TRUE(adapters_of(*model).empty()) << "nothing attached before the refusal";
}

TEST(LoraInputs, RankAboveALayersWidthIsOneMessage) {
  auto model = tiny_model("unet_tiny");
  const std::string message = error_of([&] { attach_lora(*model, {"to_q"}, {9, 9.0, 0.0}, "[lora] target_modules"); });
  EXPECT_NE(message.find("rank 9 is above the width of layer down_blocks.0.attentions.0.transformer_blocks.0.attn1."
                         "to_q (8 in, 8 out); use rank <= 8"),
            std::string::npos) << message;
  EXPECT_TRUE(adapters_of(*model).empty());
}

TEST(LoraInputs, GlobsAndSuffixesFollowPeftsRule) {
  EXPECT_TRUE(target_matches("to_q", "mid_block.attentions.0.transformer_blocks.0.attn1.to_q"));
  EXPECT_FALSE(target_matches("to_q", "mid_block.attentions.0.transformer_blocks.0.attn1.xto_q"));
  EXPECT_TRUE(target_matches("to_out.0", "a.attn2.to_out.0"));
  EXPECT_TRUE(target_matches("down_blocks.*.to_k", "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_k"));
  EXPECT_FALSE(target_matches("down_blocks.*.to_k", "up_blocks.1.attentions.0.transformer_blocks.0.attn1.to_k"));
}

TEST(LoraInputs, ConfigTableChecksEachKey) {
  const auto read = [](const std::string& text) {
    ConfigTable root = ConfigTable::parse_string(text, "run.toml");
    ConfigTable table = root.table("lora");
    return LoraConfig::from_toml(table, root.has("lora"));
  };
  EXPECT_NE(error_of([&] { read("[lora]\nrank = 0\n"); }).find("lora.rank"), std::string::npos);
  EXPECT_NE(error_of([&] { read("[lora]\nrank = 0\n"); }).find("must be >= 1"), std::string::npos);
  EXPECT_NE(error_of([&] { read("[lora]\ndropout = 1.0\n"); }).find("must be in [0, 1)"), std::string::npos);
  EXPECT_NE(error_of([&] { read("[lora]\nr = 8\n"); }).find("zest calls it rank"), std::string::npos);
  const LoraConfig c = read("[lora]\nrank = 8\ntarget_modules = [\"to_q\", \"ff.net.2\"]\n");
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.rank, 8);
  EXPECT_EQ(c.effective_alpha(), 8.0);  // alpha defaults to rank, as the diffusers scripts set it
  EXPECT_EQ(c.target_modules.size(), 2u);
  EXPECT_FALSE(read("").enabled);
}

// ---- files ----

// A one-rank LoRA run of the tiny UNet, one step, saved as `zest train` saves it (the extra.lora record).
struct SavedRun {
  std::string dir;
  std::shared_ptr<UnitModule> model;  // its adapters as trained
  TensorMap inputs;
  ~SavedRun() { fs::remove_all(dir); }
};

std::unique_ptr<SavedRun> saved_lora_run(const std::string& flavor, bool with_record = true) {
  auto run = std::make_unique<SavedRun>();
  run->dir = (fs::temp_directory_path() / ("zest_lora_file_" + flavor)).string();
  fs::remove_all(run->dir);
  run->model = tiny_model(flavor, /*seed=*/3);
  LoraRecord record{2, 4.0, 0.0, {}, "", 3};
  record.layers = attach_lora(*run->model, family_of_flavor(flavor).lora_targets, {2, 4.0, 0.0}, "test");
  freeze_all_but_adapters(*run->model);
  EngineConfig e;
  e.stage = 1;
  e.device = DeviceKind::cpu;
  e.precision = Precision::fp32;
  Engine engine(run->model, e, OptimConfig{}, SchedulerConfig{}, std::make_shared<SelfCommunicator>());
  run->inputs = fixed_inputs(flavor, *run->model, 2, 1);
  engine.backward(forward(flavor, *run->model, run->inputs).square().mean());
  engine.step();
  checkpoint::SaveRequest request;
  request.dir = run->dir;
  request.model_name = flavor;
  request.model_config = builtin_model_config(flavor).toml_text;
  nlohmann::json extra{{"model_source", {{"family", family_of_flavor(flavor).name}, {"format", "zest"}}}};
  if (with_record) extra["lora"] = record.to_json();
  request.extra_json = extra.dump();
  checkpoint::Saver saver;
  saver.save(engine, request);
  saver.wait(engine.comm());
  return run;
}

TEST(LoraFiles, ExportHasPeftNamesShapesAndAlpha) {
  const auto run = saved_lora_run("unet_tiny");
  const std::string out = run->dir + "_export";
  fs::remove_all(out);
  export_checkpoint(run->dir, out, {}, kLoraFormat);
  const safetensors::Reader file((fs::path(out) / kLoraFileName).string());
  const std::string layer = "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q";
  ASSERT_TRUE(file.contains(layer + ".lora_A.weight"));
  EXPECT_EQ(file.info(layer + ".lora_A.weight").shape, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(file.info(layer + ".lora_B.weight").shape, (std::vector<int64_t>{8, 2}));
  EXPECT_TRUE(file.contains("unet.up_blocks.2.attentions.2.transformer_blocks.0.attn2.to_out.0.lora_B.weight"));
  for (const auto& t : file.tensors()) {
    EXPECT_EQ(t.name.rfind("unet.", 0), 0u) << t.name;
    EXPECT_TRUE(is_adapter_parameter(t.name)) << t.name;
    EXPECT_EQ(t.name.find("to_q.lora_A.default"), std::string::npos) << "peft's saved names carry no adapter name";
  }
  // 4 projections × 2 attentions of every transformer block, 2 factors each.
  size_t blocks = 0;
  for (const auto& item : run->model->named_modules())
    if (item.key().size() > 6 && item.key().substr(item.key().size() - 6) == ".attn1") ++blocks;
  EXPECT_GT(blocks, 10u);
  EXPECT_EQ(file.tensors().size(), blocks * 2 * 4 * 2);
  const auto config = nlohmann::json::parse(file.metadata().at("lora_adapter_metadata"));
  EXPECT_EQ(config.at("unet.r"), 2);
  EXPECT_EQ(config.at("unet.lora_alpha"), 4.0);
  EXPECT_EQ(config.at("unet.target_modules").size(), blocks * 2 * 4);
  fs::remove_all(out);
}

TEST(LoraFiles, LoadedOntoAFreshBaseGivesTheTrainedOutput) {
  for (const std::string flavor : {"unet_tiny", "hymotion_tiny"}) {
    const auto run = saved_lora_run(flavor);
    const torch::Tensor trained = forward(flavor, *run->model, run->inputs).detach();
    const std::string file = run->dir + ".safetensors";
    export_checkpoint(run->dir, file, {}, kLoraFormat);
    auto fresh = tiny_model(flavor, /*seed=*/3);
    const LoadedLora loaded = load_lora(*fresh, family_of_flavor(flavor).name, file, 1.0);
    EXPECT_EQ(loaded.rank, 2);
    EXPECT_EQ(loaded.alpha, 4.0);
    const torch::Tensor again = forward(flavor, *fresh, run->inputs).detach();
    EXPECT_LE((again - trained).abs().max().item<double>(), 1e-6) << flavor;
    // --lora-scale 0 gives the base back.
    set_adapter_multiplier(*fresh, 0.0);
    EXPECT_TRUE(forward(flavor, *fresh, run->inputs).detach().equal(
        forward(flavor, *tiny_model(flavor, 3), run->inputs).detach()));
    // From the checkpoint itself, the same.
    auto from_checkpoint = tiny_model(flavor, /*seed=*/3);
    load_lora(*from_checkpoint, family_of_flavor(flavor).name, run->dir, 1.0);
    EXPECT_LE((forward(flavor, *from_checkpoint, run->inputs).detach() - trained).abs().max().item<double>(), 1e-6);
    fs::remove(file);
  }
}

// A later file of the same adapters replaces the values in place (what a validation round does): the model
// then gives what a fresh base with that file gives, the multiplier stays, and what does not fit is refused
// with nothing changed.
TEST(LoraFiles, ValuesOfALaterFileReplaceTheAttachedOnes) {
  const std::string flavor = "unet_tiny";
  const std::string family = family_of_flavor(flavor).name;
  const auto run = saved_lora_run(flavor);
  const std::string trained_file = run->dir + ".safetensors", other_file = run->dir + "_other.safetensors";
  export_checkpoint(run->dir, trained_file, {}, kLoraFormat);
  {  // the same layers, other values
    const safetensors::Reader trained(trained_file);
    safetensors::NamedTensors other;
    for (const auto& t : trained.tensors()) other.emplace_back(t.name, trained.read(t.name) * 0.5 + 0.01);
    safetensors::save_file(other_file, other, trained.metadata());
  }
  auto model = tiny_model(flavor, /*seed=*/3);
  load_lora(*model, family, other_file, 1.0);
  set_adapter_multiplier(*model, 0.5);
  const LoadedLora loaded = load_lora_values(*model, family, trained_file);
  EXPECT_EQ(loaded.rank, 2);
  auto fresh = tiny_model(flavor, /*seed=*/3);
  load_lora(*fresh, family, trained_file, 0.5);
  EXPECT_LE((forward(flavor, *model, run->inputs) - forward(flavor, *fresh, run->inputs)).abs().max().item<double>(), 1e-6);

  auto bare = tiny_model(flavor, /*seed=*/3);
  const std::string no_adapter = error_of([&] { load_lora_values(*bare, family, trained_file); });
  EXPECT_NE(no_adapter.find(trained_file + ": layer "), std::string::npos) << no_adapter;
  EXPECT_NE(no_adapter.find(" has no adapter"), std::string::npos) << no_adapter;
  EXPECT_TRUE(adapters_of(*bare).empty());
  {  // fewer layers than the model has adapters: the rest would keep stale values
    const safetensors::Reader trained(trained_file);
    const std::string first = trained.tensors().front().name;
    const std::string layer = first.substr(0, first.rfind(".lora_"));
    safetensors::NamedTensors first_layer;
    for (const auto& t : trained.tensors())
      if (t.name.rfind(layer + ".lora_", 0) == 0) first_layer.emplace_back(t.name, trained.read(t.name));
    ASSERT_EQ(first_layer.size(), 2u);
    safetensors::save_file(other_file, first_layer, trained.metadata());
  }
  const torch::Tensor before = forward(flavor, *model, run->inputs);
  const std::string partial = error_of([&] { load_lora_values(*model, family, other_file); });
  EXPECT_NE(partial.find(other_file + ": holds 1 adapted layers where the model has "), std::string::npos) << partial;
  EXPECT_TRUE(forward(flavor, *model, run->inputs).equal(before));
  fs::remove(trained_file);
  fs::remove(other_file);
}

TEST(LoraFiles, FoldedExportEqualsTheAdapters) {
  const auto run = saved_lora_run("unet_tiny");
  const torch::Tensor trained = forward("unet_tiny", *run->model, run->inputs).detach();
  const std::string file = run->dir + "_folded.safetensors";
  export_checkpoint(run->dir, file, {}, kSafetensorsFormat);
  auto plain = tiny_model("unet_tiny", /*seed=*/11);  // other values: all of them come from the file
  {
    const safetensors::Reader folded(file);
    torch::NoGradGuard no_grad;
    EXPECT_EQ(folded.tensors().size(), plain->named_parameters().size());
    for (auto& item : plain->named_parameters()) item.value().copy_(folded.read(item.key()));
  }
  const double scale = trained.abs().max().item<double>();
  EXPECT_LE((forward("unet_tiny", *plain, run->inputs).detach() - trained).abs().max().item<double>(), 1e-5 * scale);
  fs::remove(file);
}

TEST(LoraFiles, AFileForAnotherModelIsOneMessage) {
  const auto run = saved_lora_run("hymotion_tiny");
  const std::string file = run->dir + ".safetensors";
  export_checkpoint(run->dir, file, {}, kLoraFormat);
  auto unet = tiny_model("unet_tiny");
  const std::string message = error_of([&] { load_lora(*unet, "unet", file, 1.0); });
  EXPECT_NE(message.find(file + ": not a LoRA file of this model"), std::string::npos) << message;
  // Names that fit the family but not this model's layers.
  auto other = tiny_model("hymotion_tiny");
  torch::NoGradGuard no_grad;
  safetensors::save_file(file, {{"base_model.model.single_blocks.99.linear1.lora_A.weight", torch::zeros({2, 4})},
                                {"base_model.model.single_blocks.99.linear1.lora_B.weight", torch::zeros({4, 2})}});
  const std::string missing = error_of([&] { load_lora(*other, "hymotion", file, 1.0); });
  EXPECT_NE(missing.find("a LoRA file for another model: this hymotion model has no layer single_blocks.99.linear1"),
            std::string::npos) << missing;
  EXPECT_TRUE(adapters_of(*other).empty());
  fs::remove(file);
}

TEST(LoraFiles, ACheckpointWithoutLoraIsRefusedForTheLoraFormat) {
  const auto run = saved_lora_run("unet_tiny", /*with_record=*/false);
  const std::string message = error_of([&] { export_checkpoint(run->dir, run->dir + ".safetensors", {}, kLoraFormat); });
  EXPECT_NE(message.find("not a checkpoint of a LoRA run (its run had no [lora] table)"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(run->dir + ".safetensors"));
}

// The checkpoint's records edited with the manifest checksum made to match: every reader of them (the LoRA
// record, the model_source record) names the manifest and the field, never the JSON library's text.
TEST(LoraFiles, CorruptCheckpointRecordsNameTheManifestAndField) {
  const auto run = saved_lora_run("unet_tiny");
  const std::string manifest = (fs::path(checkpoint::resolve_checkpoint(run->dir)) / checkpoint::kManifestName).string();
  std::string saved;
  {
    std::ifstream in(manifest);
    saved.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto export_with = [&](const std::function<void(nlohmann::ordered_json&)>& edit, const std::string& format) {
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(saved);
    edit(doc["extra"]);
    std::ofstream(manifest, std::ios::trunc) << checkpoint::with_manifest_checksum(doc.dump(), manifest);
    return error_of([&] { export_checkpoint(run->dir, run->dir + "_out.safetensors", {}, format); });
  };
  const std::string rank = export_with([](auto& extra) { extra["lora"]["rank"] = "2"; }, kLoraFormat);
  EXPECT_NE(rank.find(manifest + ": field 'extra.lora.rank' must be an integer >= 1, got a string (\"2\")"),
            std::string::npos) << rank;
  const std::string layers = export_with([](auto& extra) { extra["lora"]["layers"] = {1, 2}; }, kLoraFormat);
  EXPECT_NE(layers.find(manifest + ": field 'extra.lora.layers[0]' must be a string, got an integer (1)"),
            std::string::npos) << layers;
  const std::string format = export_with([](auto& extra) { extra["model_source"]["format"] = 3; }, "safetensors");
  EXPECT_NE(format.find(manifest + ": field 'extra.model_source.format' must be a string, got an integer (3)"),
            std::string::npos) << format;
  for (const std::string& message : {rank, layers, format})
    EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(run->dir + "_out.safetensors"));
}

}  // namespace
}  // namespace zest::lora_test
