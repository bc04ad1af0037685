// Loading released weights into a freshly built model: strict checking lists every mismatch by name in
// one error and loads nothing; strict = false loads the rest; stored fp16/bf16 convert exactly; sharded
// diffusers weights load like one file; a HY-Motion release's pipeline tensors are passed over; the
// [model] table's pretrained rules; and a resuming run never reads the base weights.
#include "comm/self_communicator.h"
#include "common/error_of.h"
#include "common/temp_dir.h"
#include "core/config_reader.h"
#include "finetune_test_util.h"
#include "models/pretrained_source.h"
#include "train/run_config.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<UnitModule> fresh(const std::string& name, int64_t seed = 99) {
  torch::manual_seed(seed);
  return build_model(builtin(name));
}

std::unique_ptr<PretrainedWeights> open_weights(const std::string& path) {
  return PretrainedWeights::open(find_pretrained_layout(path));
}

void expect_equal(const Named& actual, const Named& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, value] : expected) EXPECT_TRUE(actual.at(name).equal(value)) << name;
}

TEST(PretrainedLoad, StrictMismatchNamesEveryTensorInOneErrorAndLoadsNothing) {
  const TempDir dir("strict");
  const Named values = write_diffusers_folder(dir.sub("u"), torch::kFloat32);
  safetensors::NamedTensors edited;
  for (const auto& [name, value] : values) {
    if (name == "conv_in.bias" || name == "conv_out.bias" || name == "time_embedding.linear_1.bias") continue;
    edited.emplace_back(name == "conv_in.weight" ? "conv_in.weigth" : name,
                        name == "conv_out.weight" ? value.flatten() : value);
  }
  edited.emplace_back("extra.tensor", torch::ones({2}));
  const std::string file = dir.sub("u/diffusion_pytorch_model.safetensors");
  safetensors::save_file(file, edited);
  auto model = fresh("unet_tiny");
  const Named before = named_tensors(*model);
  const std::string message = exception_text([&] { load_pretrained_weights(*model, *open_weights(dir.sub("u")), true); });
  EXPECT_NE(message.find(file + " does not match the model (strict loading; nothing was loaded)"), std::string::npos)
      << message;
  for (const char* name : {"conv_in.bias", "conv_out.bias", "time_embedding.linear_1.bias", "conv_in.weight",
                           "conv_in.weigth", "extra.tensor", "conv_out.weight (file [", "4 missing", "2 unexpected",
                           "1 of the wrong shape"})
    EXPECT_NE(message.find(name), std::string::npos) << name << " not in: " << message;
  expect_equal(named_tensors(*model), before);

  const PretrainedReport report = load_pretrained_weights(*model, *open_weights(dir.sub("u")), false);
  EXPECT_EQ(report.missing.size(), 4u);
  EXPECT_EQ(report.unexpected.size(), 2u);
  EXPECT_EQ(report.wrong_shape.size(), 1u);
  EXPECT_EQ(report.loaded, static_cast<int64_t>(values.size()) - 5);
  const Named after = named_tensors(*model);
  EXPECT_TRUE(after.at("conv_in.bias").equal(before.at("conv_in.bias")));  // kept as initialised
  EXPECT_TRUE(after.at("conv_norm_out.weight").equal(values.at("conv_norm_out.weight")));
}

TEST(PretrainedLoad, HalfAndBfloat16WeightsConvertExactly) {
  for (const torch::Dtype dtype : {torch::kFloat16, torch::kBFloat16}) {
    const TempDir dir("dtype");
    const Named values = write_diffusers_folder(dir.sub("u"), dtype);
    auto model = fresh("unet_tiny");
    const PretrainedReport report = load_pretrained_weights(*model, *open_weights(dir.sub("u")), true);
    EXPECT_EQ(report.dtypes, std::vector<std::string>{safetensors::dtype_name(dtype)});
    expect_equal(named_tensors(*model), values);
  }
}

TEST(PretrainedLoad, ShardedDiffusersWeightsLoadLikeOneFile) {
  const TempDir dir("sharded");
  const Named values = write_diffusers_folder(dir.sub("u"), torch::kFloat32);
  fs::remove(dir.sub("u/diffusion_pytorch_model.safetensors"));
  safetensors::NamedTensors first, second;
  nlohmann::json weight_map = nlohmann::json::object();
  for (const auto& [name, value] : values) {
    const bool in_first = first.size() < values.size() / 2;
    (in_first ? first : second).emplace_back(name, value);
    weight_map[name] = in_first ? "diffusion_pytorch_model-00001-of-00002.safetensors"
                                : "diffusion_pytorch_model-00002-of-00002.safetensors";
  }
  safetensors::save_file(dir.sub("u/diffusion_pytorch_model-00001-of-00002.safetensors"), first);
  safetensors::save_file(dir.sub("u/diffusion_pytorch_model-00002-of-00002.safetensors"), second);
  const std::string index = dir.sub("u/diffusion_pytorch_model.safetensors.index.json");
  std::ofstream(index) << nlohmann::json{{"metadata", {{"total_size", 1}}}, {"weight_map", weight_map}}.dump();
  auto model = fresh("unet_tiny");
  EXPECT_EQ(find_pretrained_layout(dir.sub("u")).weights_file, index);
  load_pretrained_weights(*model, *open_weights(dir.sub("u")), true);
  expect_equal(named_tensors(*model), values);

  weight_map[values.begin()->first] = "diffusion_pytorch_model-00002-of-00002.safetensors";
  std::ofstream(index) << nlohmann::json{{"weight_map", weight_map}}.dump();
  EXPECT_NE(exception_text([&] { open_weights(dir.sub("u")); }).find("which does not hold it"), std::string::npos);
}

TEST(PretrainedLoad, HyMotionReleaseLoadsTheNetworkAndPassesOverThePipeline) {
  const TempDir dir("release");
  const auto [network, pipeline] = write_hymotion_release(dir.sub("r"));
  const auto weights = open_weights(dir.sub("r"));
  EXPECT_EQ(weights->passed_over().size(), pipeline.size());
  auto model = fresh("hymotion_tiny");
  load_pretrained_weights(*model, *weights, true);
  expect_equal(named_tensors(*model), network);
}

// ---- the run file ----

RunConfig parse_run(const std::string& model_table) {
  ConfigTable root = ConfigTable::parse_string(model_table + "[data]\ndir = \"d\"\n", "run.toml");
  return run_config_from_toml(root);
}

TEST(PretrainedRunFile, FolderBringsTheArchitectureFileNeedsOne) {
  const TempDir dir("runfile");
  write_diffusers_folder(dir.sub("u"), torch::kFloat32);
  const std::string folder = "[model]\npretrained = \"" + dir.sub("u") + "\"\n";
  const RunConfig c = parse_run(folder);
  EXPECT_TRUE(c.model.has_pretrained_folder());
  EXPECT_TRUE(c.model.strict);
  EXPECT_EQ(resolve_model(c.model).family->name, "unet");
  const std::string printed = to_toml(c);
  EXPECT_NE(printed.find("pretrained = \"" + dir.sub("u") + "\""), std::string::npos) << printed;
  EXPECT_EQ(to_toml(parse_run(printed.substr(printed.find("[model]"), printed.find("[data]") - printed.find("[model]")))),
            printed);  // what config check prints reads back the same

  EXPECT_NE(exception_text([&] { parse_run(folder + "name = \"unet_tiny\"\n"); })
                .find("model.name: not used with model.pretrained"),
            std::string::npos);
  const std::string file = dir.sub("u/diffusion_pytorch_model.safetensors");
  EXPECT_NE(exception_text([&] { parse_run("[model]\npretrained = \"" + file + "\"\n"); })
                .find("a .safetensors file holds no architecture: add model.name or model.config"),
            std::string::npos);
  EXPECT_EQ(parse_run("[model]\nname = \"unet_tiny\"\npretrained = \"" + file + "\"\nstrict = false\n").model.strict,
            false);
  EXPECT_NE(exception_text([&] { parse_run("[model]\npretrained = \"" + dir.sub("nowhere") + "\"\n"); })
                .find("model.pretrained: not found"),
            std::string::npos);
  EXPECT_NE(exception_text([&] { parse_run("[model]\nname = \"unet_tiny\"\nstrict = false\n"); })
                .find("model.strict: applies to model.pretrained"),
            std::string::npos);
}

// The trainer's call on a fresh start loads the weights; a bad weights file fails it with the file named
// (the resumed case, which never reads them, runs end to end in test_roundtrip.cpp).
TEST(PretrainedRunFile, StartFromPretrainedLoadsOnAFreshStart) {
  const TempDir dir("start");
  const Named values = write_diffusers_folder(dir.sub("u"), torch::kFloat32);
  const RunConfig c = parse_run("[model]\npretrained = \"" + dir.sub("u") + "\"\n");
  const ResolvedModel resolved = resolve_model(c.model);
  SelfCommunicator comm;
  auto model = fresh("unet_tiny");
  const nlohmann::json record = start_from_pretrained(*model, resolved, c.model, "", comm);
  EXPECT_EQ(record["format"], "diffusers");
  EXPECT_EQ(record["config_text"], read_text(dir.sub("u/config.json")));
  expect_equal(named_tensors(*model), values);
  std::ofstream(dir.sub("u/diffusion_pytorch_model.safetensors"), std::ios::trunc) << "not safetensors";
  EXPECT_NE(exception_text([&] { start_from_pretrained(*model, resolved, c.model, "", comm); })
                .find("diffusion_pytorch_model.safetensors"),
            std::string::npos);
}

// A plain safetensors file with the model's own names (e.g. a zest merge) needs name/config for the
// architecture; its sharded .index.json form is a file too.
TEST(PretrainedRunFile, APlainSafetensorsFileWithTheModelsOwnNames) {
  const TempDir dir("plain");
  const Named values = write_diffusers_folder(dir.sub("u"), torch::kBFloat16);
  const std::string file = dir.sub("model.safetensors");
  fs::rename(dir.sub("u/diffusion_pytorch_model.safetensors"), file);
  const RunConfig c = parse_run("[model]\nname = \"unet_tiny\"\npretrained = \"" + file + "\"\n");
  const ResolvedModel resolved = resolve_model(c.model);
  EXPECT_EQ(resolved.pretrained, file);
  SelfCommunicator comm;
  auto model = fresh("unet_tiny");
  EXPECT_EQ(start_from_pretrained(*model, resolved, c.model, "", comm)["format"], "zest");
  expect_equal(named_tensors(*model), values);
  std::ofstream(dir.sub("model.safetensors.index.json"))
      << nlohmann::json{{"weight_map", {{"conv_in.weight", "model.safetensors"}}}}.dump();
  EXPECT_EQ(find_pretrained_layout(dir.sub("model.safetensors.index.json")).format, kSafetensorsFormat);
  EXPECT_EQ(open_weights(dir.sub("model.safetensors.index.json"))->tensors().size(), values.size());
}

}  // namespace
}  // namespace zest::testing
