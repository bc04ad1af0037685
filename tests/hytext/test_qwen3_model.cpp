// models/qwen3 without transformers: the decoder stack against an independent float64 implementation of the
// same formulas (scripts/golden/qwen3_formula_reference.py, plain torch), its config.json checks, and the folder
// loading's messages. Equality with transformers itself is in test_hy_text_golden.cpp.
#include "tiny_text_encoders.h"

#include "core/check.h"
#include "formats/npy.h"
#include "models/qwen3/qwen3_config.h"
#include "models/qwen3/qwen3_load.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace zest::hytext::test {
namespace {

namespace fs = std::filesystem;

fs::path qwen3_scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "zest_qwen3" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

bool python_has_torch() { return std::system("/usr/bin/python3 -c 'import torch, numpy' > /dev/null 2>&1") == 0; }

TEST(Qwen3Model, EqualsTheFormulasInFloat64) {
  if (!python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is needed for the reference";
  const fs::path w = qwen3_scratch("formulas");
  write_tiny_qwen(w / "qwen", 24, 5, /*layers=*/2);  // head_dim 8 ≠ 24 / 2 heads; one key/value head
  torch::manual_seed(9);
  const torch::Tensor ids = torch::randint(0, 288, {2, 12}, torch::kInt64);
  torch::Tensor mask = torch::ones({2, 12}, torch::kInt64);
  mask[1].narrow(0, 8, 4).zero_();  // right padding, as the release's batches
  std::ofstream(w / "ids.npy", std::ios::binary) << npy::encode(ids);
  std::ofstream(w / "mask.npy", std::ios::binary) << npy::encode(mask);
  const std::string command = "/usr/bin/python3 " + std::string(ZEST_SOURCE_DIR) + "/scripts/golden/qwen3_formula_reference.py " +
                              (w / "qwen").string() + " " + (w / "ids.npy").string() + " " + (w / "mask.npy").string() +
                              " " + (w / "ref.npy").string() + " > " + (w / "py.log").string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const torch::Tensor reference = npy::read((w / "ref.npy").string());

  const auto model = qwen3::load_qwen3_model(w / "qwen", torch::kCPU, torch::kFloat32);
  torch::NoGradGuard no_grad;
  const qwen3::Qwen3Output out = model->forward(ids, mask, /*all_hidden_states=*/true);
  ASSERT_EQ(static_cast<int64_t>(out.hidden_states.size()), reference.size(0));
  for (size_t i = 0; i < out.hidden_states.size(); ++i) {
    const torch::Tensor expected = reference[static_cast<int64_t>(i)];
    const double error = (out.hidden_states[i].to(torch::kFloat64) - expected).abs().max().item<double>() /
                         expected.abs().max().item<double>();
    EXPECT_LE(error, 1e-5) << "hidden_states[" << i << "]";
  }
  EXPECT_TRUE(out.last_hidden_state.equal(out.hidden_states.back()));
  // bf16 (the GPU's dtype) on the CPU: the same within bf16 rounding.
  const auto half = qwen3::load_qwen3_model(w / "qwen", torch::kCPU, torch::kBFloat16);
  const torch::Tensor last16 = half->forward(ids, mask).last_hidden_state.to(torch::kFloat64);
  EXPECT_LE((last16 - reference[-1]).abs().max().item<double>() / reference[-1].abs().max().item<double>(), 5e-2);
}

std::string config_error(const nlohmann::json& config) {
  try {
    qwen3::Qwen3Config::from_json_text(config.dump(), "Q/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Qwen3Config, EveryArchitectureFieldIsChecked) {
  const nlohmann::json good = {{"model_type", "qwen3"}, {"vocab_size", 100}, {"hidden_size", 32}, {"intermediate_size", 64},
                               {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                               {"head_dim", 12}, {"rope_theta", 1000000.0}, {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"}};
  const qwen3::Qwen3Config c = qwen3::Qwen3Config::from_json_text(good.dump(), "Q/config.json");
  EXPECT_EQ(c.head_dim, 12);
  EXPECT_EQ(c.rope_theta, 1e6);
  // transformers 5 writes the RoPE base into rope_parameters.
  nlohmann::json v5 = good;
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000.0}};
  EXPECT_EQ(qwen3::Qwen3Config::from_json_text(v5.dump(), "Q/config.json").rope_theta, 5000.0);
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json c2 = good;
    c2[key] = value;
    return config_error(c2);
  };
  EXPECT_NE(with("model_type", "llama").find("Q/config.json: field 'model_type' is \"llama\"; expected \"qwen3\""), std::string::npos);
  EXPECT_NE(with("hidden_size", 0).find("'hidden_size'"), std::string::npos);
  EXPECT_NE(with("hidden_size", 1 << 20).find("'hidden_size'"), std::string::npos);
  EXPECT_NE(with("num_hidden_layers", "two").find("'num_hidden_layers'"), std::string::npos);
  EXPECT_NE(with("num_key_value_heads", 3).find("it must divide num_attention_heads (4)"), std::string::npos);
  EXPECT_NE(with("head_dim", 7).find("field 'head_dim' is 7; it must be even"), std::string::npos);
  EXPECT_NE(with("hidden_act", "gelu").find("SwiGLU"), std::string::npos);
  EXPECT_NE(with("use_sliding_window", true).find("no sliding window"), std::string::npos);
  EXPECT_NE(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}).find("plain rotary embeddings"), std::string::npos);
  EXPECT_NE(with("rms_norm_eps", -1).find("'rms_norm_eps'"), std::string::npos);
  EXPECT_NE(config_error(nlohmann::json::array()).find("Q/config.json"), std::string::npos);
}

// Qwen/Qwen3-8B's config.json as released (transformers 4.51): the stack zest loads is its 8.19 B parameters less
// the untied lm_head (151936 × 4096).
TEST(Qwen3Config, Qwen3_8BAsReleased) {
  const std::string released = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";
  const qwen3::Qwen3Config c = qwen3::Qwen3Config::from_json_text(released, "Qwen3-8B/config.json");
  EXPECT_EQ(c.parameter_count(), 7'568'405'504);
  EXPECT_EQ(c.parameter_count() + c.vocab_size * c.hidden_size, 8'190'735'360);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_theta, 1e6);
}

TEST(Qwen3Load, FoldersThatAreNotQwen3AreOneClearMessage) {
  const fs::path w = qwen3_scratch("bad");
  auto error_of = [](const fs::path& folder) -> std::string {
    try {
      qwen3::load_qwen3_model(folder, torch::kCPU, torch::kFloat32);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(w / "absent").find("no such folder"), std::string::npos);
  fs::create_directories(w / "empty");
  EXPECT_NE(error_of(w / "empty").find("no config.json"), std::string::npos);
  write_tiny_qwen(w / "qwen", 16, 1);
  fs::rename(w / "qwen" / "model.safetensors", w / "qwen" / "weights.safetensors");
  EXPECT_NE(error_of(w / "qwen").find("neither model.safetensors nor model.safetensors.index.json"), std::string::npos);
  // Weights of another shape than config.json says, and a tensor the model does not have.
  write_tiny_qwen(w / "other", 24, 1);
  fs::copy_file(w / "other" / "model.safetensors", w / "qwen" / "model.safetensors");
  const std::string mismatch = error_of(w / "qwen");
  EXPECT_NE(mismatch.find("does not match the Qwen3 model of"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("of another shape (model.embed_tokens.weight [288, 24] (the config gives [288, 16])"),
            std::string::npos) << mismatch;
}

}  // namespace
}  // namespace zest::hytext::test
