// AutoencoderKL: structure under the reference names, the latent distribution and its seeded sample,
// scaling, force_upcast, config and loading errors, and parity with diffusers on the tiny golden vectors.
#include "common/error_of.h"
#include "formats/safetensors.h"
#include "common/golden_file.h"
#include "core/check.h"
#include "models/state_dict.h"
#include "models/vae/autoencoder_kl.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zest::vae::test {
namespace {

using zest::testing::error_of;

std::string data_path(const std::string& name) { return std::string(ZEST_TEST_DATA) + "/" + name; }

VaeConfig tiny_config() {
  return VaeConfig::from_json(nlohmann::json::parse(R"({
    "_class_name": "AutoencoderKL", "in_channels": 3, "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
    "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"], "block_out_channels": [8, 16],
    "layers_per_block": 1, "act_fn": "silu", "latent_channels": 4, "norm_num_groups": 4, "sample_size": 16,
    "scaling_factor": 0.13025, "force_upcast": true, "shift_factor": null, "latents_mean": null})"),
                              "tiny.json");
}

void randomize(torch::nn::Module& module, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) p.copy_(0.2 * torch::randn(p.sizes()));
}

TEST(AutoencoderKL, StateDictOfTheReleasedVae) {
  VaeConfig sd;
  sd.block_out_channels = {128, 256, 512, 512};
  sd.layers_per_block = 2;
  const AutoencoderKL model(sd, torch::TensorOptions().device(torch::kMeta));
  std::vector<std::string> lines;
  for (const auto& p : model->named_parameters()) {
    std::string shape = "[";
    for (int64_t i = 0; i < p.value().dim(); ++i) shape += (i ? ", " : "") + std::to_string(p.value().size(i));
    lines.push_back(p.key() + "\t" + shape + "]");
  }
  EXPECT_EQ(lines.size(), 248u);
  EXPECT_EQ(lines.front(), "encoder.conv_in.weight\t[128, 3, 3, 3]");
  EXPECT_NE(std::find(lines.begin(), lines.end(), "encoder.down_blocks.0.downsamplers.0.conv.weight\t[128, 128, 3, 3]"),
            lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "decoder.mid_block.attentions.0.to_out.0.weight\t[512, 512]"), lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "decoder.up_blocks.3.resnets.0.conv_shortcut.weight\t[128, 256, 1, 1]"),
            lines.end());
  const std::string reference = data_path("vae/vae_sd_state_dict.txt");
  if (std::filesystem::exists(reference)) {  // diffusers' own list (scripts/golden/make_vae_golden.py)
    std::ifstream in(reference);
    std::vector<std::string> expected;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) expected.push_back(line);
    }
    // The same names and shapes; the order differs in the mid blocks only, where diffusers registers the
    // attention before the resnets and zest in forward order. Files load by name, so the order is not
    // part of the format (changing it would change the committed tiny pipelines, whose values are drawn
    // in state-dict order, and with them the reference pipelines' golden pixels).
    std::vector<std::string> ours = lines;
    std::sort(ours.begin(), ours.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(ours, expected);
  }
}

TEST(AutoencoderKL, EncodesDecodesAndSamplesWithTheGenerator) {
  AutoencoderKL model(tiny_config());
  randomize(*model, 5);
  torch::NoGradGuard no_grad;
  const torch::Tensor images = torch::rand({2, 3, 16, 16}) * 2 - 1;
  const LatentDistribution dist = model->encode(images);
  EXPECT_EQ(dist.mean.sizes(), (std::vector<int64_t>{2, 4, 8, 8}));
  EXPECT_LE(dist.logvar.max().item<double>(), 20.0);
  const torch::Tensor a = dist.sample(at::detail::createCPUGenerator(7));
  const torch::Tensor b = dist.sample(at::detail::createCPUGenerator(7));
  const torch::Tensor c = dist.sample(at::detail::createCPUGenerator(8));
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, c));
  // mean + std · N(0,1) with the generator's normal draws.
  const torch::Tensor noise = torch::randn(dist.mean.sizes(), at::detail::createCPUGenerator(7));
  EXPECT_TRUE(torch::allclose(a, dist.mean + dist.std() * noise));
  EXPECT_EQ(model->decode(dist.mean).sizes(), images.sizes());
  EXPECT_TRUE(torch::allclose(model->from_unet_latents(model->to_unet_latents(a)), a, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(model->to_unet_latents(a), a * 0.13025));
  EXPECT_EQ(vae_compute_dtype(model->config(), torch::kHalf), torch::kFloat);
  EXPECT_EQ(vae_compute_dtype(model->config(), torch::kBFloat16), torch::kBFloat16);
  EXPECT_NE(error_of([&] { model->encode(torch::zeros({1, 3, 15, 16})); }).find("multiples of 2"), std::string::npos);
}

// diffusers' DiagonalGaussianDistribution clamps the log-variance to [-30, 20]: an encoder output far
// outside (here the quant_conv's bias) must come out at the bounds exactly.
TEST(AutoencoderKL, LogVarianceIsClampedToItsRange) {
  AutoencoderKL model(tiny_config());
  randomize(*model, 5);
  torch::NoGradGuard no_grad;
  ASSERT_TRUE(model->quant_conv);
  auto& conv = *model->quant_conv;
  conv.weight.zero_();
  conv.bias.zero_();
  conv.bias.slice(0, 4, 6).fill_(100.0);  // the log-variance half: two channels far above, two far below
  conv.bias.slice(0, 6, 8).fill_(-100.0);
  const LatentDistribution dist = model->encode(torch::rand({1, 3, 16, 16}));
  EXPECT_EQ(dist.logvar.slice(1, 0, 2).min().item<double>(), 20.0);
  EXPECT_EQ(dist.logvar.slice(1, 2, 4).max().item<double>(), -30.0);
}

// A VAE with a shift (SD3-style): the UNet's latents are (z - shift) · scale and back, in that order.
TEST(AutoencoderKL, ShiftFactorComesBeforeTheScaling) {
  nlohmann::json config = nlohmann::json::parse(R"({"block_out_channels": [8, 16], "norm_num_groups": 4,
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"], "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"],
    "scaling_factor": 1.5305, "shift_factor": 0.0609})");
  AutoencoderKL model(VaeConfig::from_json(config, "shifted.json"));
  const torch::Tensor z = torch::tensor({1.0, -2.0, 0.25}, torch::kFloat64);
  EXPECT_TRUE(torch::allclose(model->to_unet_latents(z), (z - 0.0609) * 1.5305, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(model->from_unet_latents(z), z / 1.5305 + 0.0609, 1e-12, 1e-12));
}

TEST(AutoencoderKL, BadConfigurationsAreOneClearMessage) {
  auto from = [](const std::string& json) {
    return [json] { VaeConfig::from_json(nlohmann::json::parse(json), "vae/config.json"); };
  };
  EXPECT_NE(error_of(from(R"({"_class_name": "AutoencoderTiny"})")).find("vae/config.json: field '_class_name' must be \"AutoencoderKL\""),
            std::string::npos);
  EXPECT_NE(error_of(from(R"({"block_out_channels": [8, 16], "norm_num_groups": 4, "down_block_types": ["DownEncoderBlock2D"]})"))
                .find("field 'down_block_types' must be an array of 2 times \"DownEncoderBlock2D\""),
            std::string::npos);
  EXPECT_NE(error_of(from(R"({"block_out_channels": [30], "norm_num_groups": 32})")).find("not a multiple"),
            std::string::npos);
  EXPECT_NE(error_of(from(R"({"latents_mean": [0.1, 0.2, 0.3, 0.4]})")).find("field 'latents_mean' is set"), std::string::npos);
  EXPECT_NE(error_of(from(R"({"force_upcast": "yes"})")).find("field 'force_upcast' must be true or false, got a string"), std::string::npos);
  EXPECT_DOUBLE_EQ(VaeConfig::from_json(nlohmann::json::object(), "c").scaling_factor, 0.18215);
  const std::filesystem::path folder = std::filesystem::path(::testing::TempDir()) / "zest_vae_no_weights";
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "config.json") << R"({"block_out_channels": [8, 16], "norm_num_groups": 4,
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"], "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"]})";
  EXPECT_NE(error_of([&] { load_autoencoder_kl(folder); }).find("diffusion_pytorch_model.safetensors: not found"),
            std::string::npos);
}

TEST(AutoencoderKL, EqualsDiffusersOnTheTinyGolden) {
  const std::string path = data_path("vae/vae_tiny.safetensors");
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is absent: run scripts/golden/make_vae_golden.py where torch is installed and commit its "
                 << "output in tests/data/vae";
  }
  const testing::GoldenFile golden = testing::GoldenFile::load(path);
  AutoencoderKL from_params(tiny_config());
  LoadOptions options;
  options.prefix = "param.";
  load_state_dict(*from_params, safetensors::Reader(path), options);
  const AutoencoderKL from_folder = load_autoencoder_kl(data_path("vae/vae_tiny"));
  torch::NoGradGuard no_grad;
  auto expect_close = [](const torch::Tensor& got, const torch::Tensor& want, const char* what) {
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_LT((got - want).abs().max().item<double>(), 2e-5) << what;
  };
  for (const AutoencoderKL* model : std::vector<const AutoencoderKL*>{&from_params, &from_folder}) {
    const LatentDistribution dist = (*model)->encode(golden.input("images"));
    expect_close(dist.mean, golden.output("mean"), "mean");
    expect_close(dist.logvar, golden.output("logvar"), "logvar");
    expect_close(dist.std(), golden.output("std"), "std");
    expect_close(dist.sample(at::detail::createCPUGenerator(7)), golden.output("sample"), "sample");
    expect_close((*model)->decode(dist.mean), golden.output("decoded"), "decoded");
    expect_close((*model)->decode(golden.output("sample")), golden.output("decoded_sample"), "decoded_sample");
  }
}

}  // namespace
}  // namespace zest::vae::test
