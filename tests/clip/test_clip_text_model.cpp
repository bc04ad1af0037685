// CLIPTextModel / CLIPTextModelWithProjection: structure under the reference names, the end-token rule,
// causality, config and loading errors, and parity with transformers on the tiny golden vectors.
#include "common/error_of.h"
#include "clip/clip_test_util.h"

#include "formats/safetensors.h"
#include "common/golden_file.h"
#include "core/check.h"
#include "models/clip/clip_text_model.h"
#include "models/state_dict.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zest::clip::test {
namespace {

using zest::testing::error_of;

CLIPTextConfig tiny_config(HiddenAct act) {
  CLIPTextConfig c;
  c.vocab_size = 512;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.projection_dim = 24;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.max_position_embeddings = 16;
  c.hidden_act = act;
  c.eos_token_id = 511;
  return c;
}

CLIPTextConfig full_config(bool sdxl_2) {
  CLIPTextConfig c;
  c.hidden_size = sdxl_2 ? 1280 : 768;
  c.intermediate_size = sdxl_2 ? 5120 : 3072;
  c.projection_dim = sdxl_2 ? 1280 : 768;
  c.num_hidden_layers = sdxl_2 ? 32 : 12;
  c.num_attention_heads = sdxl_2 ? 20 : 12;
  c.hidden_act = sdxl_2 ? HiddenAct::gelu : HiddenAct::quick_gelu;
  return c;
}

std::string shape_text(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

std::vector<std::string> state_dict_lines(const torch::nn::Module& module) {
  std::vector<std::string> lines;
  for (const auto& p : module.named_parameters()) lines.push_back(p.key() + "\t" + shape_text(p.value()));
  return lines;
}

void randomize(torch::nn::Module& module, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) p.copy_(0.2 * torch::randn(p.sizes()));
}

TEST(CLIPTextModel, ReleasedEncodersHaveTheReferenceStateDicts) {
  const torch::TensorOptions meta = torch::TensorOptions().device(torch::kMeta);
  const CLIPTextModel sd15(full_config(false), false, meta);
  const CLIPTextModel sdxl2(full_config(true), true, meta);
  const auto sd15_lines = state_dict_lines(*sd15), sdxl2_lines = state_dict_lines(*sdxl2);
  // 2 embeddings + 16 tensors a layer + the final norm (+ text_projection).
  EXPECT_EQ(sd15_lines.size(), 2u + 12 * 16 + 2);
  EXPECT_EQ(sdxl2_lines.size(), 2u + 32 * 16 + 2 + 1);
  EXPECT_EQ(sd15_lines.front(), "text_model.embeddings.token_embedding.weight\t[49408, 768]");
  EXPECT_EQ(sd15_lines[2], "text_model.encoder.layers.0.self_attn.k_proj.weight\t[768, 768]");
  EXPECT_EQ(sdxl2_lines.back(), "text_projection.weight\t[1280, 1280]");
  // The reference's own lists (scripts/golden/make_clip_text_golden.py), when they have been made.
  // transformers 5 names CLIPTextModel's tensors without "text_model." (the released files keep it;
  // load_clip_text_weights takes both), so the SD1.5 list may have the prefix or not.
  for (const auto& [file, lines] : {std::pair{"clip/clip_text_sd15_state_dict.txt", sd15_lines},
                                    std::pair{"clip/clip_text_sdxl_2_state_dict.txt", sdxl2_lines}}) {
    if (!std::filesystem::exists(data_path(file))) continue;
    std::istringstream in(read_text(data_path(file)));
    std::vector<std::string> expected;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) expected.push_back(line);
    }
    ASSERT_FALSE(expected.empty()) << file;
    const bool unprefixed = expected.front().rfind("text_model.", 0) != 0;
    std::vector<std::string> ours = lines;
    if (unprefixed) {
      for (std::string& line : ours) {
        ASSERT_EQ(line.rfind("text_model.", 0), 0u) << line;
        line.erase(0, std::string("text_model.").size());
      }
    }
    EXPECT_EQ(ours, expected) << file;
  }
}

TEST(CLIPTextModel, EndTokenPositions) {
  // The released vocabulary: the first 49407 (argmax), whatever eos_token_id the configuration says.
  const torch::Tensor released = torch::tensor({49406, 320, 49407, 49407, 49407, 49406, 49407, 0, 0, 0}).view({2, 5});
  EXPECT_TRUE(torch::equal(end_token_positions(released, 2), torch::tensor({2, 1})));
  EXPECT_TRUE(torch::equal(end_token_positions(released, 49407), torch::tensor({2, 1})));
  // Another vocabulary: the first eos_token_id.
  const torch::Tensor other = torch::tensor({510, 7, 511, 511, 510, 511, 0, 0}).view({2, 4});
  EXPECT_TRUE(torch::equal(end_token_positions(other, 511).to(torch::kLong), torch::tensor({2, 1})));
  // A legacy configuration (eos_token_id 2) takes the largest id.
  const torch::Tensor legacy = torch::tensor({3, 9, 4, 2}).view({1, 4});
  EXPECT_TRUE(torch::equal(end_token_positions(legacy, 2), torch::tensor({1})));
}

TEST(CLIPTextModel, AttentionIsCausal) {
  CLIPTextModel model(tiny_config(HiddenAct::quick_gelu), true);
  randomize(*model, 3);
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::tensor({510, 5, 6, 7, 511, 511}).view({1, 6});
  torch::Tensor b = a.clone();
  b[0][3] = 99;
  const CLIPTextOutput oa = model->forward(a), ob = model->forward(b);
  EXPECT_TRUE(torch::allclose(oa.last_hidden_state.narrow(1, 0, 3), ob.last_hidden_state.narrow(1, 0, 3)));
  EXPECT_FALSE(torch::allclose(oa.last_hidden_state.narrow(1, 3, 1), ob.last_hidden_state.narrow(1, 3, 1)));
  EXPECT_FALSE(torch::allclose(oa.text_embeds, ob.text_embeds));  // the end token (position 4) sees position 3
  ASSERT_EQ(oa.hidden_states.size(), 4u);
  EXPECT_EQ(oa.text_embeds.sizes(), (std::vector<int64_t>{1, 24}));
  EXPECT_TRUE(torch::equal(oa.pooled, oa.last_hidden_state.select(1, 4)));
}

TEST(CLIPTextModel, Bfloat16IsCloseToFloat32) {
  CLIPTextModel model(tiny_config(HiddenAct::gelu), true);
  randomize(*model, 4);
  CLIPTextModel half(tiny_config(HiddenAct::gelu), true, torch::TensorOptions().dtype(torch::kBFloat16));
  {
    torch::NoGradGuard no_grad;
    auto src = model->named_parameters();
    for (auto& p : half->named_parameters()) p.value().copy_(src[p.key()]);
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::tensor({510, 5, 6, 7, 511, 511, 510, 9, 511, 0, 0, 0}).view({2, 6});
  const CLIPTextOutput full = model->forward(ids), low = half->forward(ids);
  const double scale = full.last_hidden_state.abs().max().item<double>();
  EXPECT_LT((low.last_hidden_state.to(torch::kFloat) - full.last_hidden_state).abs().max().item<double>(), 0.05 * scale);
  EXPECT_LT((low.text_embeds.to(torch::kFloat) - full.text_embeds).abs().max().item<double>(),
            0.05 * full.text_embeds.abs().max().item<double>());
}

TEST(CLIPTextModel, BadConfigurationsAndFoldersAreOneClearMessage) {
  auto from = [](const char* json) { return [json] { CLIPTextConfig::from_json(nlohmann::json::parse(json), "cfg.json"); }; };
  EXPECT_NE(error_of(from(R"({"hidden_act": "swish"})")).find("cfg.json: field 'hidden_act' must be one of"), std::string::npos);
  EXPECT_NE(error_of(from(R"({"hidden_size": 30, "num_attention_heads": 4})")).find("not a multiple"), std::string::npos);
  EXPECT_NE(error_of(from(R"({"num_hidden_layers": -1})")).find("field 'num_hidden_layers' must be an integer in [1, 256], got an integer (-1)"),
            std::string::npos);
  EXPECT_NE(error_of(from(R"({"model_type": "t5"})")).find("field 'model_type' must be \"clip_text_model\", got a string (\"t5\")"),
            std::string::npos);
  const CLIPTextConfig read = CLIPTextConfig::from_json(
      nlohmann::json::parse(R"({"hidden_size": 1280, "num_attention_heads": 20, "hidden_act": "gelu", "eos_token_id": 2,
                               "architectures": ["CLIPTextModelWithProjection"], "torch_dtype": "float16"})"),
      "cfg.json");
  EXPECT_EQ(read.hidden_size, 1280);
  EXPECT_EQ(read.head_dim(), 64);
  EXPECT_EQ(read.hidden_act, HiddenAct::gelu);
  EXPECT_EQ(read.eos_token_id, 2);

  // A folder whose weights lack a tensor, and one without weights.
  const std::filesystem::path folder = fresh_folder("text_encoder_bad");
  nlohmann::json config = {{"architectures", {"CLIPTextModel"}}, {"model_type", "clip_text_model"}, {"vocab_size", 512},
                           {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 3},
                           {"num_attention_heads", 4}, {"max_position_embeddings", 16}, {"eos_token_id", 511}};
  write_text(folder / "config.json", config.dump());
  EXPECT_NE(error_of([&] { load_clip_text_model(folder); }).find("model.safetensors: not found"), std::string::npos);
  CLIPTextModel model(tiny_config(HiddenAct::quick_gelu), false);
  safetensors::NamedTensors tensors;
  for (const auto& p : model->named_parameters()) {
    if (p.key() != "text_model.final_layer_norm.bias") tensors.emplace_back(p.key(), p.value().detach());
  }
  tensors.emplace_back("text_model.embeddings.position_ids", torch::arange(16).view({1, 16}));  // older releases have it
  safetensors::save_file((folder / "model.safetensors").string(), tensors);
  const std::string message = error_of([&] { load_clip_text_model(folder); });
  EXPECT_NE(message.find("1 missing (text_model.final_layer_norm.bias)"), std::string::npos) << message;
  EXPECT_EQ(message.find("position_ids"), std::string::npos) << message;

  tensors.emplace_back("text_model.final_layer_norm.bias", torch::zeros({32}));
  safetensors::save_file((folder / "model.safetensors").string(), tensors);
  const CLIPTextModel loaded = load_clip_text_model(folder);
  EXPECT_FALSE(loaded->with_projection());
  EXPECT_TRUE(torch::equal(loaded->text_model->final_layer_norm->weight, model->text_model->final_layer_norm->weight));
}

// transformers' outputs on the tiny configurations (scripts/golden/make_clip_text_golden.py).
class CLIPTextGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(CLIPTextGolden, EqualsTransformers) {
  const std::string name = GetParam();
  const bool projection = name == "clip_text_proj_tiny";
  const std::string path = data_path("clip/" + name + ".safetensors");
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is absent: run scripts/golden/make_clip_text_golden.py where transformers is installed "
                 << "and commit its output in tests/data/clip";
  }
  const testing::GoldenFile golden = testing::GoldenFile::load(path);
  const torch::Tensor ids = golden.input("input_ids");
  // From the golden parameters, by name and strictly; and from the save_pretrained folder.
  CLIPTextModel from_params(tiny_config(projection ? HiddenAct::gelu : HiddenAct::quick_gelu), projection);
  load_clip_text_weights(from_params, safetensors::Reader(path), "param.", "the tiny CLIP text model");
  const CLIPTextModel from_folder =
      load_clip_text_model(data_path(projection ? "clip/text_encoder_2_tiny" : "clip/text_encoder_tiny"));
  EXPECT_EQ(from_folder->with_projection(), projection);
  torch::NoGradGuard no_grad;
  for (const CLIPTextModel* model : std::vector<const CLIPTextModel*>{&from_params, &from_folder}) {
    const CLIPTextOutput out = (*model)->forward(ids);
    auto expect_close = [](const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
      ASSERT_EQ(got.sizes(), want.sizes()) << what;
      EXPECT_LT((got - want).abs().max().item<double>(), 2e-5) << what;
    };
    expect_close(out.last_hidden_state, golden.output("last_hidden_state"), "last_hidden_state");
    expect_close(out.pooled, golden.output("pooler_output"), "pooler_output");
    ASSERT_EQ(out.hidden_states.size(), 4u);
    for (size_t i = 0; i < out.hidden_states.size(); ++i) {
      expect_close(out.hidden_states[i], golden.output("hidden_states." + std::to_string(i)), "hidden_states." + std::to_string(i));
    }
    if (projection) expect_close(out.text_embeds, golden.output("text_embeds"), "text_embeds");
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, CLIPTextGolden, ::testing::Values("clip_text_tiny", "clip_text_proj_tiny"));

}  // namespace
}  // namespace zest::clip::test
