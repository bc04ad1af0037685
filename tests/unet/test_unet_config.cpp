// UNetConfig: diffusers field names and defaults, per-level resolution, and clear errors for unknown
// keys and for values the port does not implement.
#include "unet_test_util.h"

namespace zest::unet::test {
namespace {

// Parsing `text` throws zest::Error whose message contains every one of `parts`.
void expect_config_error(const std::string& text, const std::vector<std::string>& parts) {
  try {
    parse_config(text);
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(UNetConfig, TinyResolvesPerLevelValues) {
  const auto c = load_config("unet_tiny");
  EXPECT_EQ(c.block_out_channels, (std::vector<int64_t>{8, 16, 16}));
  EXPECT_EQ(c.down_cross_attention, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(c.up_cross_attention, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(c.layers_per_block, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(c.transformer_layers_per_block, (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(c.num_heads, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(c.cross_attention_dim, (std::vector<int64_t>{12, 12, 12}));
  EXPECT_EQ(c.norm_num_groups, 4);
  EXPECT_TRUE(c.text_time_embedding);
  EXPECT_EQ(c.addition_time_embed_dim, 4);
  EXPECT_EQ(c.projection_class_embeddings_input_dim, 32);
  EXPECT_EQ(c.time_embed_dim(), 32);
  EXPECT_FALSE(c.use_linear_projection);
}

TEST(UNetConfig, RealConfigsParse) {
  const auto sd15 = load_config("unet_sd15");
  EXPECT_EQ(sd15.num_heads, (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(sd15.down_cross_attention, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(sd15.cross_attention_dim, (std::vector<int64_t>{768, 768, 768, 768}));
  EXPECT_FALSE(sd15.text_time_embedding);
  const auto sdxl = load_config("unet_sdxl");
  EXPECT_EQ(sdxl.num_heads, (std::vector<int64_t>{5, 10, 20}));
  EXPECT_EQ(sdxl.transformer_layers_per_block, (std::vector<int64_t>{1, 2, 10}));
  EXPECT_TRUE(sdxl.use_linear_projection);
  EXPECT_TRUE(sdxl.text_time_embedding);
  EXPECT_EQ(sdxl.projection_class_embeddings_input_dim, 2816);
}

TEST(UNetConfig, EmptyTableGivesDiffusersDefaults) {
  const auto c = parse_config("");
  EXPECT_EQ(c.block_out_channels, (std::vector<int64_t>{320, 640, 1280, 1280}));
  EXPECT_EQ(c.down_cross_attention, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(c.up_cross_attention, (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(c.num_heads, (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(c.cross_attention_dim, (std::vector<int64_t>{1280, 1280, 1280, 1280}));
  EXPECT_EQ(c.norm_num_groups, 32);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_TRUE(c.flip_sin_to_cos);
  EXPECT_FALSE(c.text_time_embedding);
}

TEST(UNetConfig, UnknownKeyIsAnError) {
  expect_config_error(tiny_config_text("attention_heads = 2"), {"attention_heads", "test.toml"});
}

TEST(UNetConfig, UnsupportedValuesNameTheKey) {
  expect_config_error(tiny_config_text("resnet_time_scale_shift = \"scale_shift\""),
                      {"resnet_time_scale_shift", "default"});
  expect_config_error(tiny_config_text("dual_cross_attention = true"), {"dual_cross_attention", "false"});
  expect_config_error(tiny_config_text("class_embed_type = \"timestep\""), {"class_embed_type"});
  expect_config_error(tiny_config_text("num_attention_heads = 2"), {"num_attention_heads"});
  expect_config_error(tiny_config_text("time_embedding_type = \"fourier\""), {"time_embedding_type"});
  expect_config_error(replaced(tiny_config_text(), "\"DownBlock2D\"", "\"SimpleCrossAttnDownBlock2D\""),
                      {"down_block_types", "SimpleCrossAttnDownBlock2D"});
  expect_config_error(replaced(tiny_config_text(), "addition_embed_type = \"text_time\"",
                               "addition_embed_type = \"text\""),
                      {"addition_embed_type", "text_time"});
}

TEST(UNetConfig, StructuralErrorsNameTheField) {
  expect_config_error(replaced(tiny_config_text(), "attention_head_dim = [2, 2, 2]",
                               "attention_head_dim = [2, 2]"),
                      {"attention_head_dim", "3"});
  expect_config_error(replaced(tiny_config_text(), "attention_head_dim = [2, 2, 2]",
                               "attention_head_dim = [2, 3, 2]"),
                      {"attention_head_dim[1]"});
  expect_config_error(replaced(tiny_config_text(), "block_out_channels = [8, 16, 16]",
                               "block_out_channels = [8, 16]"),
                      {"block_out_channels"});
}

}  // namespace
}  // namespace zest::unet::test
