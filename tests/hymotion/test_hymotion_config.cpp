// HY-Motion configuration and structure: built-in configs, exact parameter counts (computed on the meta
// device, nothing allocated), state-dict names/shapes against the released models' lists, units, and
// config errors (unknown keys, unsupported values).
#include "hymotion_test_util.h"

#include <nlohmann/json.hpp>

#include <set>

namespace zest::hymotion::test {
namespace {

int64_t family_count(const std::string& flavor) {
  auto table = ConfigTable::parse_file(config_path(flavor));
  return family().count_parameters(table);
}

TEST(HyMotionConfig, ParameterCountsOfBuiltinConfigs) {
  EXPECT_EQ(family_count("hymotion_1b"), 1042868681);
  EXPECT_EQ(family_count("hymotion_lite"), 460841673);
  EXPECT_EQ(family_count("hymotion_tiny"), 181036);
}

// Closed form of docs/models.md 1.2, as an independent check of the module structure.
TEST(HyMotionConfig, CountMatchesClosedForm) {
  for (const auto& flavor : {"hymotion_1b", "hymotion_lite", "hymotion_tiny"}) {
    const HyMotionConfig c = load_config(flavor);
    const int64_t D = c.feat_dim, d = c.head_dim(), M = c.mlp_hidden(), R = c.refiner.num_layers;
    const int64_t expected = (c.input_dim * D + D) + (c.ctxt_input_dim * D + D) +
                             (c.vtxt_input_dim * D + D * D + 2 * D) + (2 * D * D + 2 * D) +
                             (5 * (D * D + D) + R * (14 * D * D + 15 * D + 4 * d)) +
                             c.num_double_blocks() * 2 * (10 * D * D + 2 * D * M + 11 * D + M + 2 * d) +
                             c.num_single_blocks() * (7 * D * D + 2 * D * M + 7 * D + M + 2 * d) +
                             (2 * D * D + 2 * D + D * c.output_dim + c.output_dim);
    EXPECT_EQ(count_parameters(c), expected) << flavor;
  }
}

void expect_state_dict_matches_list(const std::string& flavor, const std::string& list_file) {
  std::istringstream lines(read_text(data_path(list_file)));
  const auto shapes = state_dict_shapes(load_config(flavor));
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line); ++i) {
    if (line.empty()) continue;
    ASSERT_LT(i, shapes.size()) << flavor << " has fewer tensors than " << list_file;
    const auto tab = line.find('\t');
    std::ostringstream shape;
    shape << c10::IntArrayRef(shapes[i].second);
    EXPECT_EQ(shapes[i].first, line.substr(0, tab)) << "tensor #" << i;
    EXPECT_EQ(shape.str(), line.substr(tab + 1)) << shapes[i].first;
  }
  EXPECT_EQ(i, shapes.size()) << flavor;
}

TEST(HyMotionConfig, StateDictNamesAndOrderMatchReleasedModels) {
  expect_state_dict_matches_list("hymotion_1b", "hymotion_1.0_state_dict.txt");
  expect_state_dict_matches_list("hymotion_lite", "hymotion_1.0_lite_state_dict.txt");
}

// Every key of the golden JSON's "config" has the same value in the TOML table, and nothing more.
void expect_table_equals_json(ConfigTable& table, const nlohmann::json& json) {
  std::set<std::string> json_keys;
  for (const auto& [key, value] : json.items()) {
    json_keys.insert(key);
    ASSERT_TRUE(table.has(key)) << table.dotted(key) << " missing from the TOML";
    if (value.is_object()) {
      auto sub = table.table(key);
      expect_table_equals_json(sub, value);
    } else if (value.is_boolean()) {
      EXPECT_EQ(table.get<bool>(key, !value.get<bool>()), value.get<bool>()) << key;
    } else if (value.is_number()) {
      EXPECT_EQ(table.get<double>(key, -1.0), value.get<double>()) << key;
    } else {
      EXPECT_EQ(table.get<std::string>(key, ""), value.get<std::string>()) << key;
    }
  }
  const auto toml_keys = table.keys();
  EXPECT_EQ(std::set<std::string>(toml_keys.begin(), toml_keys.end()), json_keys) << table.path();
}

TEST(HyMotionConfig, TinyTomlEqualsGoldenJsonConfig) {
  const auto golden = nlohmann::json::parse(read_text(data_path("hymotion_tiny.json")));
  auto table = ConfigTable::parse_file(config_path("hymotion_tiny"));
  expect_table_equals_json(table, golden.at("config"));
}

TEST(HyMotionConfig, TinyConfigIsTheGoldenOne) {
  const HyMotionConfig c = load_config("hymotion_tiny");
  EXPECT_EQ(c.feat_dim, 32);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_double_blocks(), 2);
  EXPECT_EQ(c.num_single_blocks(), 4);
  EXPECT_EQ(c.narrowband_window(), 3);
  EXPECT_EQ(c.mask_mode, MaskMode::narrowband);
  EXPECT_FALSE(c.apply_rope_to_single_branch);
  EXPECT_DOUBLE_EQ(c.time_factor, 1000.0);
  const HyMotionConfig big = load_config("hymotion_1b");
  EXPECT_EQ(big.narrowband_window(), 60);
  EXPECT_EQ(big.head_dim(), 64);
}

TEST(HyMotionConfig, CodeDefaultsApplyToAbsentKeys) {
  auto table = ConfigTable::parse_string("input_dim = 6\nfeat_dim = 32\n", "defaults.toml");
  const HyMotionConfig c = HyMotionConfig::from_toml(table);
  EXPECT_EQ(c.output_dim, 6);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.num_layers, 12);
  EXPECT_EQ(c.ctxt_input_dim, 4096);
  EXPECT_EQ(c.vtxt_input_dim, 256);
  EXPECT_EQ(c.mask_mode, MaskMode::none);
  EXPECT_TRUE(c.apply_rope_to_single_branch);
  EXPECT_DOUBLE_EQ(c.time_factor, 1.0);
  EXPECT_EQ(c.refiner.num_layers, 2);
  EXPECT_EQ(c.final_layer.act, Act::silu);
  // A given final_layer_cfg replaces the default dict, so FinalLayer's own default (gelu) applies.
  auto table2 = ConfigTable::parse_string("input_dim = 6\nfeat_dim = 32\nfinal_layer_cfg = {}\n", "f.toml");
  EXPECT_EQ(HyMotionConfig::from_toml(table2).final_layer.act, Act::gelu);
}

// The tiny config text with the line of `key` replaced (or appended when absent).
std::string tiny_with(const std::string& key, const std::string& line) {
  std::istringstream in(read_text(config_path("hymotion_tiny")));
  std::string out, l;
  bool replaced = false;
  while (std::getline(in, l)) {
    if (l.rfind(key + " =", 0) == 0) l = line, replaced = true;
    out += l + "\n";
  }
  return replaced ? out : out + line + "\n";
}

// from_toml on `text` must throw zest::Error whose message names every entry of `needles`.
void expect_config_error(const std::string& text, const std::vector<std::string>& needles) {
  auto table = ConfigTable::parse_string(text, "bad.toml");
  try {
    HyMotionConfig::from_toml(table);
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const zest::Error& e) {
    for (const auto& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
  }
}

TEST(HyMotionConfig, UnknownKeysAreErrors) {
  expect_config_error(tiny_with("num_layer", "num_layer = 6"), {"num_layer"});
  expect_config_error(tiny_with("text_refiner_cfg", "text_refiner_cfg = { num_layers = 2, heads = 4 }"),
                      {"heads"});
  expect_config_error(tiny_with("final_layer_cfg", "final_layer_cfg = { act = \"silu\" }"), {"act"});
}

TEST(HyMotionConfig, UnsupportedValuesAreErrors) {
  expect_config_error(tiny_with("insert_start_token", "insert_start_token = true"), {"insert_start_token"});
  expect_config_error(tiny_with("with_long_skip_connection", "with_long_skip_connection = true"),
                      {"with_long_skip_connection"});
  expect_config_error(tiny_with("norm_type", "norm_type = \"rms\""), {"norm_type", "layer"});
  expect_config_error(tiny_with("mask_mode", "mask_mode = \"band\""), {"mask_mode", "narrowband"});
  expect_config_error(tiny_with("dropout", "dropout = 0.1"), {"dropout"});
  expect_config_error(tiny_with("num_layers", "num_layers = 7"), {"num_layers"});
  expect_config_error(tiny_with("num_heads", "num_heads = 5"), {"num_heads"});
  expect_config_error(tiny_with("mlp_act_type", "mlp_act_type = \"swish\""), {"mlp_act_type"});
  expect_config_error(tiny_with("final_layer_module", "final_layer_module = \"x.Head\""), {"final_layer_module"});
}

TEST(HyMotionConfig, UnitsCoverEveryParameterOnceInForwardOrder) {
  const HyMotionModel model(load_config("hymotion_tiny"));
  const auto units = model.unit_decls();
  std::vector<std::string> names;
  for (const auto& u : units) names.push_back(u.name);
  const std::vector<std::string> expected = {"embed",           "text_refiner",    "double_blocks.0",
                                             "double_blocks.1", "single_blocks.0", "single_blocks.1",
                                             "single_blocks.2", "single_blocks.3", "final_layer"};
  EXPECT_EQ(names, expected);
  size_t last_unit = 0;
  for (const auto& p : model.named_parameters()) {
    int owners = 0;
    size_t owner = 0;
    for (size_t u = 0; u < units.size(); ++u)
      for (const auto& prefix : units[u].prefixes)
        if (p.key().rfind(prefix, 0) == 0) ++owners, owner = u;
    EXPECT_EQ(owners, 1) << p.key();
    EXPECT_GE(owner, last_unit) << p.key() << " breaks the unit order";  // parameters grouped by unit
    last_unit = owner;
  }
}

TEST(HyMotionConfig, OptionalBranchesBuildAndRun) {
  // No refiner, causal mask, RoPE on motion only, LayerNorm q/k, no qkv bias: other reference branches.
  auto table = ConfigTable::parse_string(
      "input_dim = 5\nfeat_dim = 16\nnum_heads = 2\nnum_layers = 3\nctxt_input_dim = 7\nvtxt_input_dim = 3\n"
      "text_refiner_module = \"\"\nmask_mode = \"causal\"\nqk_norm_type = \"layer\"\nqkv_bias = false\n",
      "branches.toml");
  HyMotionModel model(HyMotionConfig::from_toml(table));
  for (const auto& p : model.named_parameters()) EXPECT_EQ(p.key().rfind("text_refiner", 0), std::string::npos);
  const auto out = model.forward({torch::randn({2, 4, 5}), torch::randn({2, 3, 7}), torch::randn({2, 1, 3}),
                                  torch::rand({2}), torch::ones({2, 4}, torch::kBool),
                                  torch::ones({2, 3}, torch::kBool)});
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 4, 5}));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
}

}  // namespace
}  // namespace zest::hymotion::test
