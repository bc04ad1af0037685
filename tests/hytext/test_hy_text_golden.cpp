// HY-Motion's text side against transformers and the release's own code (tests/data/hy_text, made by
// scripts/golden/make_hy_text_goldens.py): Qwen's tokenizer on hard texts, the chat text and crop_start, Qwen3's
// hidden states (one file and sharded), the release's token batch, and HYTextModel.encode's features.
#include "common/tensor_close.h"
#include "hy_text_test_util.h"

#include "models/hy_text/hy_text_encoder.h"
#include "models/hy_text/motion_prompt.h"
#include "models/qwen3/qwen3_load.h"
#include "models/qwen3/qwen_tokenizer.h"

namespace zest::hytext::test {
namespace {

constexpr double kHiddenTolerance = 1e-5;  // float32 against float32: rounding only

std::vector<std::string> golden_texts(const nlohmann::json& golden) {
  std::vector<std::string> texts;
  for (const auto& text : golden["texts"]) texts.push_back(text.get<std::string>());
  return texts;
}

TEST(QwenTokenizerGolden, TokensEqualTransformersOnHardTexts) {
  ZEST_REQUIRE_HY_TEXT_GOLDENS();
  const nlohmann::json golden = golden_json();
  const auto tokenizer = qwen3::QwenTokenizer::from_folder(golden_dir() / "qwen3_tiny");
  ASSERT_GE(golden["tokens"].size(), 10u);
  for (const auto& row : golden["tokens"]) {
    const std::string text = row["text"].get<std::string>();
    const auto expected = row["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(tokenizer.encode(text), expected) << "text: " << printable(text);
    // The first n ids are those of the whole text, cut (what truncation gives).
    const size_t n = expected.size() / 2;
    EXPECT_EQ(tokenizer.encode(text, n), std::vector<int64_t>(expected.begin(), expected.begin() + n)) << printable(text);
  }
  EXPECT_EQ(tokenizer.pad_id(), tokenizer.token_id("<|endoftext|>"));
}

TEST(MotionPromptGolden, ChatTextAndCropStartEqualTheRelease) {
  ZEST_REQUIRE_HY_TEXT_GOLDENS();
  const nlohmann::json golden = golden_json();
  EXPECT_EQ(std::string(kMotionSystemPrompt), golden["system_prompt"].get<std::string>());
  for (const auto& row : golden["chat"]) {
    EXPECT_EQ(motion_chat_text(row["text"].get<std::string>()), row["chat_text"].get<std::string>());
  }
  const auto tokenizer = qwen3::QwenTokenizer::from_folder(golden_dir() / "qwen3_tiny");
  EXPECT_EQ(motion_crop_start(tokenizer), golden["crop_start"].get<int64_t>());
  EXPECT_EQ(tokenizer.encode(motion_chat_text("<BOC>")), golden["crop_marker"]["chat_ids"].get<std::vector<int64_t>>());
}

TEST(Qwen3Golden, HiddenStatesEqualTransformers) {
  ZEST_REQUIRE_HY_TEXT_GOLDENS();
  // The first goldens' raw forward cast a bf16-loaded model to float32, which rounds transformers' rotary inv_freq
  // buffer to bf16 too (the release never does that); files made since record the buffer's dtype.
  const nlohmann::json checks = golden_json()["checks"];
  if (checks.value("qwen_raw_forward_inv_freq_dtype", "") != "torch.float32")
    GTEST_SKIP() << "these goldens' raw forward used a bf16-rounded RoPE table: rerun make_hy_text_goldens.py";
  const auto model = qwen3::load_qwen3_model(golden_dir() / "qwen3_tiny", torch::kCPU, torch::kFloat32);
  torch::NoGradGuard no_grad;
  const auto out = model->forward(golden_tensor("qwen.input_ids"), golden_tensor("qwen.attention_mask"), true);
  const int64_t count = golden_json()["qwen_hidden_states_count"].get<int64_t>();
  ASSERT_EQ(static_cast<int64_t>(out.hidden_states.size()), count);
  for (int64_t i = 0; i < count; ++i) {
    const double error = testing::relative_max_error(out.hidden_states[i], golden_tensor("qwen.hidden_states." + std::to_string(i)));
    EXPECT_LE(error, kHiddenTolerance) << "hidden_states[" << i << "]";
  }
  EXPECT_LE(testing::relative_max_error(out.last_hidden_state, golden_tensor("qwen.last_hidden_state")), kHiddenTolerance);
}

TEST(Qwen3Golden, AShardedFolderLoadsTheSame) {
  ZEST_REQUIRE_HY_TEXT_GOLDENS();
  // Another configuration: one key/value head for four queries, tied embeddings (no lm_head.weight stored),
  // float32 weights in three files named by model.safetensors.index.json.
  const auto model = qwen3::load_qwen3_model(golden_dir() / "qwen3_tiny_sharded", torch::kCPU, torch::kFloat32);
  torch::NoGradGuard no_grad;
  const auto out = model->forward(golden_tensor("qwen.input_ids"), golden_tensor("qwen.attention_mask"));
  EXPECT_LE(testing::relative_max_error(out.last_hidden_state, golden_tensor("sharded.last_hidden_state")), kHiddenTolerance);
}

HyTextEncoder golden_encoder() {
  return HyTextEncoder({golden_dir() / "qwen3_tiny", golden_dir() / "clip_l_tiny"}, torch::kCPU, torch::kFloat32,
                       golden_json()["max_length_llm"].get<int64_t>());
}

TEST(HyTextEncoderGolden, TokenBatchEqualsTheRelease) {
  ZEST_REQUIRE_HY_TEXT_GOLDENS();
  const auto encoder = golden_encoder();
  const nlohmann::json golden = golden_json();
  EXPECT_EQ(encoder.crop_start(), golden["crop_start"].get<int64_t>());
  const LlmTokens tokens = encoder.llm_tokens(golden_texts(golden));
  EXPECT_TRUE(tokens.ids.equal(golden_tensor("features.llm_input_ids")));
  EXPECT_TRUE(tokens.mask.equal(golden_tensor("features.llm_attention_mask")));
  // CLIP's: the release pads to the longest caption, zest to 77 with the same end token; the common part is equal.
  const auto clip_tokenizer = clip::CLIPTokenizer::from_folder(golden_dir() / "clip_l_tiny");
  const torch::Tensor expected = golden_tensor("features.clip_input_ids");
  const std::vector<std::string> texts = golden_texts(golden);
  for (size_t b = 0; b < texts.size(); ++b) {
    const torch::Tensor mine = torch::tensor(clip_tokenizer.encode_padded(texts[b]), torch::kInt64);
    EXPECT_TRUE(mine.narrow(0, 0, expected.size(1)).equal(expected[static_cast<int64_t>(b)])) << printable(texts[b]);
  }
}

TEST(HyTextEncoderGolden, FeaturesEqualTheReleasesEncode) {
  ZEST_REQUIRE_HY_TEXT_GOLDENS();
  const auto encoder = golden_encoder();
  const MotionTextFeatures features = encoder.encode(golden_texts(golden_json()));
  const torch::Tensor ctxt = golden_tensor("features.ctxt_raw");
  ASSERT_EQ(features.ctxt.sizes(), ctxt.sizes());
  EXPECT_LE(testing::relative_max_error(features.ctxt, ctxt), kHiddenTolerance);
  EXPECT_TRUE(features.ctxt_length.equal(golden_tensor("features.ctxt_length")))
      << features.ctxt_length << golden_tensor("features.ctxt_length");
  const torch::Tensor vtxt = golden_tensor("features.vtxt_raw").squeeze(1);
  ASSERT_EQ(features.vtxt.sizes(), vtxt.sizes());
  EXPECT_LE(testing::relative_max_error(features.vtxt, vtxt), kHiddenTolerance);
}

}  // namespace
}  // namespace zest::hytext::test
