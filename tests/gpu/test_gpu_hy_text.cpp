// HY-Motion's text encoders on CUDA (ctest label `gpu`): the golden Qwen3 (tests/data/hy_text, made with
// transformers) in float32 and, as the release runs it, in bf16 on the GPU; the release's features in bf16; and
// the encoding throughput of a Qwen3-8B-shaped model (random weights, bf16), printed for bench/RESULTS.md.
#include "common/tensor_close.h"
#include "hytext/hy_text_test_util.h"

#include "models/hy_text/hy_text_encoder.h"
#include "formats/safetensors.h"
#include "models/qwen3/qwen3_load.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace zest::hytext::test {
namespace {

const torch::Device kGpu(torch::kCUDA, 0);

TEST(GpuHyText, GoldenQwen3InFloat32AndBf16) {
  ZEST_REQUIRE_HY_TEXT_GOLDENS();
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = golden_tensor("qwen.input_ids").to(kGpu), mask = golden_tensor("qwen.attention_mask").to(kGpu);
  const torch::Tensor expected = golden_tensor("qwen.last_hidden_state");
  // TF32 off for the float32 comparison: the reference ran in true float32 on the CPU.
  at::globalContext().setAllowTF32CuBLAS(false);
  const auto fp32 = qwen3::load_qwen3_model(golden_dir() / "qwen3_tiny", kGpu, torch::kFloat32);
  EXPECT_LE(testing::relative_max_error(fp32->forward(ids, mask).last_hidden_state.cpu(), expected), 1e-5);
  const auto bf16 = qwen3::load_qwen3_model(golden_dir() / "qwen3_tiny", kGpu, torch::kBFloat16);
  const double error = testing::relative_max_error(bf16->forward(ids, mask).last_hidden_state.cpu(), expected);
  std::printf("[gpu hytext] golden Qwen3 in bf16 on %s: max relative error %.3g against float32\n",
              kGpu.str().c_str(), error);
  EXPECT_LE(error, 5e-2);
}

TEST(GpuHyText, ReleaseFeaturesInBf16) {
  ZEST_REQUIRE_HY_TEXT_GOLDENS();
  const nlohmann::json golden = golden_json();
  std::vector<std::string> texts;
  for (const auto& text : golden["texts"]) texts.push_back(text.get<std::string>());
  const HyTextEncoder encoder({golden_dir() / "qwen3_tiny", golden_dir() / "clip_l_tiny"}, kGpu, torch::kBFloat16,
                              golden["max_length_llm"].get<int64_t>());
  const MotionTextFeatures features = encoder.encode(texts);
  EXPECT_TRUE(features.ctxt_length.equal(golden_tensor("features.ctxt_length")));
  const double error = testing::relative_max_error(features.ctxt, golden_tensor("features_bf16.ctxt_raw"));
  std::printf("[gpu hytext] features in bf16 (GPU) against the release's bf16 (CPU): max relative error %.3g\n", error);
  EXPECT_LE(error, 5e-2);
  EXPECT_LE(testing::relative_max_error(features.vtxt, golden_tensor("features.vtxt_raw").squeeze(1)), 1e-4);
}

// A larger random Qwen3 (hidden 1024, 16 query / 4 key-value heads of 128), made with transformers on the GPU
// machine by `make_hy_text_goldens.py --large-gpu DIR` (not committed): zest's bf16 forward on CUDA against
// transformers' bf16 on CUDA and float32 on the CPU. Skipped unless ZEST_HY_TEXT_LARGE=DIR names that folder.
TEST(GpuHyText, LargerQwen3InBf16AgainstTransformers) {
  const char* dir = std::getenv("ZEST_HY_TEXT_LARGE");
  if (dir == nullptr) GTEST_SKIP() << "set ZEST_HY_TEXT_LARGE to the folder of make_hy_text_goldens.py --large-gpu";
  const safetensors::Reader golden((std::filesystem::path(dir) / "large_golden.safetensors").string());
  torch::NoGradGuard no_grad;
  const auto model = qwen3::load_qwen3_model(std::filesystem::path(dir) / "qwen3_large", kGpu, torch::kBFloat16);
  const torch::Tensor mask = golden.read("attention_mask");
  const torch::Tensor ours = model->forward(golden.read("input_ids").to(kGpu), mask.to(kGpu)).last_hidden_state.cpu();
  // Only the tokens' rows: padding rows are never read (their length masks them).
  const torch::Tensor valid = mask.to(torch::kBool).unsqueeze(-1);
  auto error_against = [&](const std::string& name) {
    const torch::Tensor reference = golden.read(name);
    return testing::relative_max_error(ours.masked_fill(valid.logical_not(), 0), reference.masked_fill(valid.logical_not(), 0));
  };
  const double vs_fp32 = error_against("last_hidden_state_fp32");
  std::printf("[gpu hytext] larger Qwen3, bf16 on CUDA: max relative error %.3g against transformers float32\n", vs_fp32);
  EXPECT_LE(vs_fp32, 5e-2);
  if (golden.contains("last_hidden_state_bf16_cuda")) {
    const double vs_bf16 = error_against("last_hidden_state_bf16_cuda");
    std::printf("[gpu hytext] larger Qwen3, bf16 on CUDA: max relative error %.3g against transformers bf16 on CUDA\n",
                vs_bf16);
    EXPECT_LE(vs_bf16, 5e-2);
  }
}

// Qwen3-8B's shape (config.json of Qwen/Qwen3-8B) with random bf16 weights: captions per second through the
// decoder stack at the release's length (crop_start ≈ 90 system-prompt tokens + 128).
TEST(GpuHyText, Qwen3_8BShapedEncodingThroughput) {
  qwen3::Qwen3Config c;
  c.vocab_size = 151936;
  c.hidden_size = 4096;
  c.intermediate_size = 12288;
  c.num_hidden_layers = 36;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 40960;
  c.rope_theta = 1e6;
  torch::NoGradGuard no_grad;
  qwen3::Qwen3Model model(c, torch::TensorOptions().dtype(torch::kBFloat16).device(kGpu));
  for (auto& p : model->parameters()) p.normal_(0, 0.02);
  for (auto& item : model->named_parameters())
    if (item.key().find("norm") != std::string::npos) item.value().fill_(1);
  const int64_t length = 90 + 128;
  for (const int64_t batch : {8, 32, 128}) {
    const torch::Tensor ids = torch::randint(0, 151643, {batch, length}, torch::TensorOptions().dtype(torch::kInt64).device(kGpu));
    torch::Tensor mask = torch::ones({batch, length}, ids.options());
    mask.narrow(1, 90 + 24, length - 90 - 24).zero_();  // captions of ~24 tokens, padded as the release pads them
    model->forward(ids, mask);  // warm-up
    torch::cuda::synchronize();
    const int repeats = 3;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i) {
      const torch::Tensor out = model->forward(ids, mask).last_hidden_state;
      ASSERT_TRUE(out.isfinite().all().item<bool>());
    }
    torch::cuda::synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
    std::printf("[gpu hytext] Qwen3-8B shape, bf16, %lld tokens: batch %lld in %.1f ms = %.0f captions/s\n",
                static_cast<long long>(length), static_cast<long long>(batch), seconds * 1e3, batch / seconds);
  }
}

}  // namespace
}  // namespace zest::hytext::test
