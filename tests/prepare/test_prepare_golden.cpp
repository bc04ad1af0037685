// `zest data prepare images` against the references on a pipeline they made: tests/data/prepare/golden/
// (scripts/golden/make_prepare_golden.py: diffusers' AutoencoderKL, transformers' CLIP text encoders and
// tokenizers saved with save_pretrained, and train_text_to_image_sdxl.py's preprocessing and encoding of
// three images). Skipped until that folder is generated.
#include "formats/safetensors.h"
#include "common/temp_dir.h"
#include "data/dataset.h"
#include "examples/zest_run.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

TEST(PrepareGolden, EqualsDiffusersAndTransformers) {
  const fs::path golden = fs::path(ZEST_TEST_DATA) / "prepare" / "golden";
  if (!fs::exists(golden / "expected.safetensors"))
    GTEST_SKIP() << "no golden output yet: run scripts/golden/make_prepare_golden.py where transformers is installed";
  const TempDir work("prepare_golden");
  const auto r = run_in(work.path(), zest_binary() + " data prepare images --pretrained " + (golden / "pipe").string() +
                                         " --images " + (golden / "images").string() +
                                         " --out data --resolution 16 --center-crop --seed 3 --device cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto dataset = open_dataset(work.sub("data"));
  const safetensors::Reader expected((golden / "expected.safetensors").string());
  const auto latents = expected.read("latents"), tokens = expected.read("text_embeds_seq");
  const auto pooled = expected.read("pooled"), time_ids = expected.read("time_ids");
  ASSERT_EQ(dataset->size(), latents.size(0));
  for (int64_t i = 0; i < dataset->size(); ++i) {
    SCOPED_TRACE("image " + std::to_string(i));
    const Sample s = dataset->get(i, 0);
    // The preprocessing is exact (PIL's resize bit for bit); the encoders agree to float32 rounding.
    EXPECT_TRUE(torch::allclose(s.at("sample"), latents[i], 1e-4, 1e-5))
        << "max diff " << (s.at("sample") - latents[i]).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(s.at("encoder_hidden_states"), tokens[i], 1e-4, 1e-5))
        << "max diff " << (s.at("encoder_hidden_states") - tokens[i]).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(s.at("text_embeds"), pooled[i], 1e-4, 1e-5));
    EXPECT_TRUE(torch::equal(s.at("time_ids"), time_ids[i]));
  }
  const safetensors::Reader empty(work.sub("data/empty_prompt.safetensors"));
  EXPECT_TRUE(torch::allclose(empty.read("text_embeds_seq"), expected.read("empty_text_embeds_seq"), 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(empty.read("pooled"), expected.read("empty_pooled"), 1e-4, 1e-5));
}

}  // namespace
}  // namespace zest::testing
