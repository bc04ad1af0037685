// UNet structure: state-dict names, shapes and order vs the reference lists (SD1.5, SDXL on the meta
// device), exact parameter counts, the unit plan, the linear-projection variant and odd input sizes.
#include "unet_test_util.h"

#include <set>

namespace zest::unet::test {
namespace {

void expect_state_dict(const std::string& flavor, const std::string& list_file, size_t expected_tensors) {
  const UNet2DConditionModel model(load_config(flavor), torch::TensorOptions().device(torch::kMeta));
  const auto expected = read_state_dict_list(list_file);
  ASSERT_EQ(expected.size(), expected_tensors);
  const auto params = model.named_parameters();
  ASSERT_EQ(params.size(), expected.size()) << flavor;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(params[i].key(), expected[i].first) << flavor << " tensor " << i;
    EXPECT_EQ(params[i].value().sizes().vec(), expected[i].second) << expected[i].first;
    EXPECT_TRUE(params[i].value().is_meta());
  }
}

TEST(UNetStructure, Sd15NamesShapesAndOrderMatchReference) {
  expect_state_dict("unet_sd15", "unet_sd15_state_dict.txt", 686);
}

TEST(UNetStructure, SdxlNamesShapesAndOrderMatchReference) {
  expect_state_dict("unet_sdxl", "unet_sdxl_state_dict.txt", 1680);
}

TEST(UNetStructure, TinyNamesMatchGolden) {
  const UNet2DConditionModel model(load_config("unet_tiny"), torch::TensorOptions().device(torch::kMeta));
  const auto golden = Golden::load();
  std::set<std::string> names;
  for (const auto& item : model.named_parameters()) {
    names.insert(item.key());
    ASSERT_TRUE(golden.params().count(item.key())) << item.key();
    EXPECT_EQ(item.value().sizes(), golden.params().at(item.key()).sizes()) << item.key();
  }
  EXPECT_EQ(names.size(), 618u);
  EXPECT_EQ(names.size(), golden.params().size());
}

TEST(UNetStructure, ExactParameterCountsWithoutAllocation) {
  const auto count = [](const std::string& flavor) {
    auto table = ConfigTable::parse_file(config_path(flavor));
    return family().count_parameters(table);
  };
  EXPECT_EQ(count("unet_tiny"), 174236);
  EXPECT_EQ(count("unet_sd15"), 859520964);
  EXPECT_EQ(count("unet_sdxl"), 2567463684);
}

// Every parameter belongs to exactly one unit (first matching prefix), every unit owns parameters,
// and forward calls the units exactly in unit_decls() order.
TEST(UNetStructure, UnitsCoverParametersAndRunInDeclaredOrder) {
  UNet2DConditionModel model(load_config("unet_tiny"));
  const auto units = model.unit_decls();
  std::map<std::string, size_t> owned;
  for (const auto& item : model.named_parameters()) {
    const auto& name = item.key();
    std::string owner;
    for (const auto& unit : units) {
      for (const auto& prefix : unit.prefixes) {
        const bool is_match = prefix.back() == '.' ? name.rfind(prefix, 0) == 0 : name == prefix;
        if (is_match && owner.empty()) owner = unit.name;
      }
    }
    ASSERT_FALSE(owner.empty()) << name << " belongs to no unit";
    ++owned[owner];
  }
  for (const auto& unit : units) EXPECT_GT(owned[unit.name], 0u) << unit.name << " owns nothing";
  EXPECT_EQ(units.front().name, "embed");
  EXPECT_EQ(units.back().name, "out");
  // 1 embed + down (4 + 2 + 4) + mid 3 + up (6 + 3 + 6) + out = 30.
  EXPECT_EQ(units.size(), 30u);

  auto runner = std::make_shared<RecordingRunner>();
  model.set_unit_runner(runner);
  torch::NoGradGuard no_grad;
  const auto golden = Golden::load();
  model.forward(golden.input("sample"), golden.input("timestep"), golden.cond());
  ASSERT_EQ(runner->calls.size(), units.size());
  for (size_t i = 0; i < units.size(); ++i) EXPECT_EQ(runner->calls[i].unit_name, units[i].name);
}

TEST(UNetStructure, SamplersAreFoldedIntoTheLastUnitOfTheirBlock) {
  const UNet2DConditionModel model(load_config("unet_tiny"), torch::TensorOptions().device(torch::kMeta));
  std::map<std::string, std::vector<std::string>> prefixes;
  for (const auto& unit : model.unit_decls()) prefixes[unit.name] = unit.prefixes;
  const std::vector<std::string> down0{"down_blocks.0.attentions.1.", "down_blocks.0.downsamplers."};
  const std::vector<std::string> down1{"down_blocks.1.resnets.1.", "down_blocks.1.downsamplers."};
  const std::vector<std::string> up1{"up_blocks.1.resnets.2.", "up_blocks.1.upsamplers."};
  EXPECT_EQ(prefixes["down_blocks.0.attentions.1"], down0);
  EXPECT_EQ(prefixes["down_blocks.1.resnets.1"], down1);
  EXPECT_EQ(prefixes["up_blocks.1.resnets.2"], up1);
  const std::vector<std::string> embed{"conv_in.", "time_embedding.", "add_embedding."};
  EXPECT_EQ(prefixes["embed"], embed);
}

TEST(UNetStructure, LinearProjectionVariantBuildsAndRuns) {
  torch::manual_seed(3);
  auto text = tiny_config_text();
  const std::string conv_projection = "use_linear_projection = false";
  text.replace(text.find(conv_projection), conv_projection.size(), "use_linear_projection = true");
  UNet2DConditionModel model(parse_config(text));
  size_t projections = 0;
  for (const auto& item : model.named_parameters()) {
    const auto& name = item.key();
    if (name.find("proj_in.weight") != std::string::npos || name.find("proj_out.weight") != std::string::npos) {
      EXPECT_EQ(item.value().dim(), 2) << name;
      ++projections;
    }
  }
  EXPECT_EQ(projections, 2u * 11u);  // proj_in + proj_out of 2 + 2 down, 1 mid, 3 + 3 up transformers
  EXPECT_EQ(count_parameters(model.config()), 174236);  // a 1×1 conv and a Linear hold the same numbers
  const auto golden = Golden::load();
  const auto out = model.forward(golden.input("sample"), golden.input("timestep"), golden.cond());
  EXPECT_EQ(out.sizes(), golden.output("sample").sizes());
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
}

// 6×6 is not a multiple of the total up factor 4: upsamplers resize to their skip's size (6 → 3 → 2
// on the way down, 2 → 3 → 6 on the way up), as diffusers does.
TEST(UNetStructure, OddSpatialSizesUpsampleToTheSkipSize) {
  torch::manual_seed(4);
  UNet2DConditionModel model(load_config("unet_tiny"));
  const auto golden = Golden::load();
  const auto sample = torch::randn({2, 4, 6, 6});
  torch::NoGradGuard no_grad;
  const auto out = model.forward(sample, torch::tensor(500), golden.cond());
  EXPECT_EQ(out.sizes(), sample.sizes());
}

TEST(UNetStructure, RegistryForwardTakesGoldenInputNames) {
  const auto golden = Golden::load();
  auto table = ConfigTable::parse_file(config_path("unet_tiny"));
  const auto model = family().build(table);
  load_params(*model, golden.params());
  TensorMap inputs;
  for (const auto& [name, tensor] : golden.groups.at("input")) inputs[name] = tensor;
  torch::NoGradGuard no_grad;
  EXPECT_LE(max_abs_diff(family().forward(*model, inputs), golden.output("sample")), 1e-5);
  inputs["mask"] = torch::ones({2});
  EXPECT_THROW(family().forward(*model, inputs), Error);
  inputs.erase("mask");
  inputs.erase("time_ids");
  EXPECT_THROW(family().forward(*model, inputs), Error);
}

}  // namespace
}  // namespace zest::unet::test
