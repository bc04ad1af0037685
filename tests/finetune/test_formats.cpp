// The file formats of released weights, read and written without Python: config.yml's YAML (as PyYAML
// resolves it), torch.save archives (round trip, and files written by PyTorch itself), diffusers'
// config.json fields, and recognising a pretrained folder by its files.
#include "common/error_of.h"
#include "common/temp_dir.h"
#include "finetune_test_util.h"
#include "models/pretrained_source.h"
#include "formats/tensor_json.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// ---- YAML ----

TEST(YamlSubset, ReadsPyYamlBlockStyleAndResolvesScalarsAsPyYaml) {
  const std::string text = R"(# a config.yml
network_module: hymotion/network/hymotion_mmdit.HunyuanMotionMMDiT
network_module_args:
  input_dim: 201
  mlp_ratio: 4.0
  norm_eps: 1.0e-05    # a float for PyYAML
  not_a_float: 1e-05   # YAML 1.1: no dot, so a string
  octal: 010
  hex: 0x1F
  flag: yes
  off_flag: Off
  nothing: ~
  empty:
  quoted: 'it''s'
  dq: "a\tb #not a comment"
  path: a:b
  flow_list: [1, 2.5, "x", null]
  flow_map: {num_layers: 2, act: silu}
  nested:
    deeper:
      value: true
  items:
  - 1
  - name: a
    size: 2
  - - 3
    - 4
  long_text: first line
    continued here
train_pipeline_args: !!python/object:whatever {a: 1}
other: |
  block scalar that is never parsed
)";
  const Json v = read_yaml_entries(text, "c.yml", {"network_module", "network_module_args", "absent"});
  EXPECT_FALSE(v.contains("absent"));
  EXPECT_EQ(v["network_module"], "hymotion/network/hymotion_mmdit.HunyuanMotionMMDiT");
  const Json& a = v["network_module_args"];
  EXPECT_EQ(a["input_dim"], 201);
  EXPECT_TRUE(a["mlp_ratio"].is_number_float());
  EXPECT_DOUBLE_EQ(a["norm_eps"].get<double>(), 1e-5);
  EXPECT_EQ(a["not_a_float"], "1e-05");
  EXPECT_EQ(a["octal"], 8);
  EXPECT_EQ(a["hex"], 31);
  EXPECT_EQ(a["flag"], true);
  EXPECT_EQ(a["off_flag"], false);
  EXPECT_TRUE(a["nothing"].is_null());
  EXPECT_TRUE(a["empty"].is_null());
  EXPECT_EQ(a["quoted"], "it's");
  EXPECT_EQ(a["dq"], "a\tb #not a comment");
  EXPECT_EQ(a["path"], "a:b");
  EXPECT_EQ(a["flow_list"], Json::parse(R"([1, 2.5, "x", null])"));
  EXPECT_EQ(a["flow_map"], Json::parse(R"({"num_layers": 2, "act": "silu"})"));
  EXPECT_EQ(a["nested"]["deeper"]["value"], true);
  EXPECT_EQ(a["items"], Json::parse(R"([1, {"name": "a", "size": 2}, [3, 4]])"));
  EXPECT_EQ(a["long_text"], "first line continued here");
}

TEST(YamlSubset, RefusesWhatItDoesNotReadNamingTheLine) {
  const auto error = [](const std::string& text) {
    return exception_text([&] { read_yaml_entries(text, "c.yml", {"k"}); });
  };
  EXPECT_NE(error("k:\n  a: &anchor 1\n").find("c.yml:2: an anchor, alias or tag is not supported"), std::string::npos);
  EXPECT_NE(error("k: |\n  text\n").find("c.yml:1: a block scalar"), std::string::npos);
  EXPECT_NE(error("k:\n  a: 1\n  a: 2\n").find("c.yml:3: key 'a' appears twice"), std::string::npos);
  EXPECT_NE(error("k:\n  a: 1\n    b: 2\n").find("c.yml:3"), std::string::npos);
  EXPECT_NE(error("k: [1, 2\n").find("c.yml:1"), std::string::npos);
  EXPECT_NE(error("k:\n\ta: 1\n").find("c.yml:2: a tab in the indentation"), std::string::npos);
}

TEST(YamlSubset, WrittenYamlReadsBackToTheSameValues) {
  const Json value = Json::parse(R"({"s": "plain", "yes_word": "yes", "num_text": "12", "colon": "a: b",
      "quote": "it's", "nl": "a\nb", "empty": "", "f": 1e-05, "big": 65536.0, "i": -3, "b": false, "n": null,
      "list": [1, "x", {"k": [true, 2.5]}, []], "map": {"inner": {"deep": "v"}, "e": {}}})");
  const std::string text = write_yaml(value);
  const Json back = read_yaml_entries(text, "w.yml", {"s", "yes_word", "num_text", "colon", "quote", "nl",
                                                                "empty", "f", "big", "i", "b", "n", "list", "map"});
  EXPECT_EQ(back, value) << text;
}

TEST(YamlSubset, PyYamlReadsWhatZestWrites) {
  if (std::system("/usr/bin/python3 -c 'import yaml' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import yaml";
  const TempDir dir("yaml");
  const Json value = Json::parse(R"({"a": {"f": 1e-05, "g": 2.0, "s": "on", "l": [1, {"x": "y: z"}]}, "t": true})");
  std::ofstream(dir.file("c.yml")) << write_yaml(value);
  std::ofstream(dir.file("expected.json")) << value.dump();
  const std::string command = "/usr/bin/python3 -c \"import json, sys, yaml; a = yaml.safe_load(open(sys.argv[1])); "
                              "b = json.load(open(sys.argv[2])); sys.exit(0 if a == b else 1)\" " +
                              dir.file("c.yml") + " " + dir.file("expected.json");
  EXPECT_EQ(std::system(command.c_str()), 0) << write_yaml(value);
}

// ---- torch.save archives ----

TEST(TorchArchive, RoundTripsDtypesShapesAndReportsKeys) {
  const TempDir dir("archive");
  const std::string path = dir.file("latest.ckpt");
  Named tensors;
  tensors["f32"] = torch::randn({3, 5});
  tensors["f16"] = torch::randn({7}).to(torch::kFloat16);
  tensors["bf16"] = torch::randn({2, 2, 2}).to(torch::kBFloat16);
  tensors["i64"] = torch::arange(70000, torch::kInt64);
  tensors["scalar"] = torch::tensor(2.5);
  tensors["empty"] = torch::empty({0, 4});
  {
    TorchArchiveWriter writer(path);
    for (const auto& [name, t] : tensors) writer.add(name, t);
    EXPECT_FALSE(fs::exists(path));  // only the .tmp file until finish()
    writer.finish("model_state_dict");
  }
  const TorchArchiveReader reader(path);
  EXPECT_EQ(reader.top_level_keys(), std::vector<std::string>{"model_state_dict"});
  const auto entries = reader.state_dict("model_state_dict");
  ASSERT_EQ(entries.size(), tensors.size());
  for (const auto& entry : entries) {
    const torch::Tensor got = reader.read(entry);
    EXPECT_EQ(got.scalar_type(), tensors.at(entry.name).scalar_type()) << entry.name;
    EXPECT_TRUE(got.equal(tensors.at(entry.name))) << entry.name;
  }
  EXPECT_NE(exception_text([&] { reader.state_dict("state_dict"); }).find("no 'state_dict' in the archive (top-level keys: "
                                                                    "model_state_dict)"),
            std::string::npos);
}

TEST(TorchArchive, AnUnfinishedWriterLeavesNothingAndBadFilesAreNamed) {
  const TempDir dir("archive_bad");
  {
    TorchArchiveWriter writer(dir.file("x.ckpt"));
    writer.add("a", torch::ones({4}));
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
  std::ofstream(dir.file("pickle.ckpt")) << "\x80\x02}q\x00.";  // a legacy (pre-zip) torch.save
  EXPECT_NE(exception_text([&] { TorchArchiveReader r(dir.file("pickle.ckpt")); })
                .find("pickle.ckpt: not a torch.save zip archive"),
            std::string::npos);
}

// PyTorch's own torch.save (an OrderedDict state dict with a non-contiguous view and a shared storage,
// next to optimizer state and plain Python values the reader must step over) reads in C++; and
// torch.load(weights_only=True) reads what zest writes. One Python run does both.
TEST(TorchArchive, InteroperatesWithPyTorch) {
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const TempDir dir("archive_py");
  {
    TorchArchiveWriter writer(dir.file("zest.ckpt"));
    writer.add("motion_transformer.w", torch::arange(6.0).reshape({2, 3}));
    writer.add("mean", torch::full({4}, 0.5, torch::kBFloat16));
    writer.finish("model_state_dict");
  }
  std::ofstream(dir.file("check.py")) << R"PY(
import collections, sys, torch
folder = sys.argv[1]
base = torch.arange(12.0).reshape(3, 4)
sd = collections.OrderedDict(w=base.t(), row=base[1], h=torch.ones(5, dtype=torch.float16))
p = torch.nn.Parameter(torch.ones(2))
opt = torch.optim.AdamW([p])
p.sum().backward()
opt.step()
torch.save({"epoch": 3, "model_state_dict": sd, "optimizer_state_dict": opt.state_dict(),
            "cfg": {"a": [1, 2.5, None, True], "s": {1, 2}}}, folder + "/latest.ckpt")
c = torch.load(folder + "/zest.ckpt", map_location="cpu", weights_only=True)
sd = c["model_state_dict"]
assert list(c) == ["model_state_dict"] and list(sd) == ["motion_transformer.w", "mean"], c
assert torch.equal(sd["motion_transformer.w"], torch.arange(6.0).reshape(2, 3))
assert sd["mean"].dtype == torch.bfloat16 and torch.equal(sd["mean"].float(), torch.full((4,), 0.5))
print("ok")
)PY";
  const std::string command =
      "/usr/bin/python3 " + dir.file("check.py") + " " + dir.path() + " > " + dir.file("py.log") + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << read_text(dir.file("py.log"));
  const TorchArchiveReader reader(dir.file("latest.ckpt"));
  std::map<std::string, torch::Tensor> got;
  for (const auto& entry : reader.state_dict("model_state_dict")) got[entry.name] = reader.read(entry);
  const torch::Tensor base = torch::arange(12.0).reshape({3, 4});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got["w"].equal(base.t()));
  EXPECT_TRUE(got["row"].equal(base[1]));
  EXPECT_EQ(got["h"].scalar_type(), torch::kFloat16);
}

// ---- configs ----

TEST(DiffusersConfig, ConstructorFieldsNullsAndUnknownFields) {
  const Json config = Json::parse(R"({"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.6.0",
      "in_channels": 4, "time_embedding_dim": null, "upcast_attention": null, "brand_new_option": 1,
      "block_out_channels": [320, 640]})");
  const unet::DiffusersConfig read = unet::read_diffusers_config(config, "u/config.json");
  EXPECT_EQ(read.architecture, Json::parse(R"({"in_channels": 4, "block_out_channels": [320, 640]})"));
  ASSERT_EQ(read.notes.size(), 1u);
  EXPECT_NE(read.notes[0].find("u/config.json: field 'brand_new_option' is not an argument"), std::string::npos);
  EXPECT_NE(exception_text([] { unet::read_diffusers_config(Json::parse(R"({"norm_num_groups": null})"), "c.json"); })
                .find("c.json: field 'norm_num_groups' is null"),
            std::string::npos);
  EXPECT_NE(exception_text([] { unet::read_diffusers_config(Json::parse(R"({"_class_name": "UNet2DModel"})"), "c.json"); })
                .find("c.json: field '_class_name' must be \"UNet2DConditionModel\", got a string (\"UNet2DModel\")"),
            std::string::npos);
}

TEST(ReleaseConfig, NetworkArgumentsAndTheirChecks) {
  const std::string text = "network_module: hymotion.network.hymotion_mmdit.HunyuanMotionMMDiT\n"
                           "network_module_args:\n  input_dim: 12\n  mask_mode: null\n  extra: 1\n";
  const hymotion::ReleaseConfig read = hymotion::read_release_config(text, "r/config.yml");
  EXPECT_EQ(read.architecture, Json::parse(R"({"input_dim": 12})"));
  ASSERT_EQ(read.notes.size(), 1u);
  EXPECT_NE(read.notes[0].find("network_module_args.extra is not an argument of HunyuanMotionMMDiT"), std::string::npos);
  EXPECT_NE(exception_text([] { hymotion::read_release_config("network_module: a.B\nnetwork_module_args: {}\n", "c.yml"); })
                .find("c.yml: network_module is a.B; zest fine-tunes"),
            std::string::npos);
  EXPECT_NE(exception_text([] {
              hymotion::read_release_config("network_module: hymotion/network/hymotion_mmdit.HunyuanMotionMMDiT\n"
                                            "network_module_args:\n  feat_dim: null\n", "c.yml");
            }).find("network_module_args.feat_dim is null"),
            std::string::npos);
}

TEST(TensorJson, IsExactForEveryDtypeAndLength) {
  for (const torch::Tensor& t : {torch::randn({1, 1, 7}), torch::randn({5}).to(torch::kBFloat16), torch::tensor(3.0),
                                 torch::arange(4, torch::kInt64), torch::randn({2, 3}).to(torch::kFloat16)}) {
    const torch::Tensor back = tensor_from_json(nlohmann::json::parse(tensor_to_json(t).dump()), "t");
    EXPECT_EQ(back.scalar_type(), t.scalar_type());
    EXPECT_TRUE(back.equal(t));
  }
}

// ---- recognising a pretrained path ----

TEST(PretrainedLayout, RecognisesEveryLayoutAndSaysWhatIsMissing) {
  const TempDir dir("layout");
  write_diffusers_folder(dir.sub("pipe/unet"), torch::kFloat32);
  std::ofstream(dir.sub("pipe/model_index.json")) << "{}";
  write_hymotion_release(dir.sub("release"));
  const PretrainedLayout pipe = find_pretrained_layout(dir.sub("pipe"));
  EXPECT_EQ(pipe.format, "diffusers");
  EXPECT_EQ(pipe.config_file, dir.sub("pipe/unet/config.json"));
  EXPECT_EQ(find_pretrained_layout(dir.sub("release")).format, "hymotion");
  EXPECT_EQ(find_pretrained_layout(dir.sub("pipe/unet/diffusion_pytorch_model.safetensors")).format,
            kSafetensorsFormat);

  fs::create_directories(dir.sub("bin"));
  std::ofstream(dir.sub("bin/config.json")) << "{}";
  std::ofstream(dir.sub("bin/diffusion_pytorch_model.bin")) << "x";
  EXPECT_NE(exception_text([&] { find_pretrained_layout(dir.sub("bin")); }).find("holds only PyTorch .bin weights"),
            std::string::npos);
  fs::create_directories(dir.sub("other"));
  std::ofstream(dir.sub("other/notes.txt")) << "x";
  EXPECT_NE(exception_text([&] { find_pretrained_layout(dir.sub("other")); }).find("found: notes.txt"), std::string::npos);
  fs::create_directories(dir.sub("half_release"));
  std::ofstream(dir.sub("half_release/config.yml")) << "x: 1\n";
  EXPECT_NE(exception_text([&] { find_pretrained_layout(dir.sub("half_release")); }).find("needs config.yml and latest.ckpt"),
            std::string::npos);
}

TEST(PretrainedLayout, AFolderGivesTheArchitecture) {
  const TempDir dir("arch");
  write_diffusers_folder(dir.sub("unet"), torch::kFloat32);
  const ResolvedModel unet = resolve_pretrained_folder(dir.sub("unet"));
  EXPECT_EQ(unet.family->name, "unet");
  EXPECT_EQ(count_model_parameters(unet), count_model_parameters(builtin("unet_tiny")));
  ASSERT_EQ(unet.notes.size(), 1u);  // some_future_field
  write_hymotion_release(dir.sub("release"));
  const ResolvedModel hy = resolve_pretrained_folder(dir.sub("release"));
  EXPECT_EQ(hy.family->name, "hymotion");
  EXPECT_EQ(count_model_parameters(hy), count_model_parameters(builtin("hymotion_tiny")));
  EXPECT_EQ(hy.notes.size(), 1u);  // unused_by_the_network
}

}  // namespace
}  // namespace zest::testing
