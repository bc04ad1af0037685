// AutoencoderKL: encoder, latent distribution, decoder, loading (see autoencoder_kl.h).
#include "models/vae/autoencoder_kl.h"

#include "formats/safetensors.h"
#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_text.h"
#include "models/model_memory.h"
#include "models/state_dict.h"
#include "models/unet/resnet.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace zest::vae {
namespace fs = std::filesystem;
namespace {

constexpr double kEps = 1e-6;  // every norm of the VAE (diffusers passes resnet_eps=1e-6)
constexpr const char* kWeightsName = "diffusion_pytorch_model.safetensors";

// DownEncoderBlock2D (resnets, then downsamplers.0 unless last) or UpDecoderBlock2D (resnets, then
// upsamplers.0 unless last).
class SamplingBlockImpl : public torch::nn::Module {
 public:
  enum class Kind { down, up };
  SamplingBlockImpl(Kind kind, int64_t in_channels, int64_t out_channels, int64_t layers, bool resample, int64_t groups,
                    const torch::TensorOptions& options)
      : kind_(kind) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    for (int64_t j = 0; j < layers; ++j) {
      resnets->push_back(VaeResnet(j == 0 ? in_channels : out_channels, out_channels, groups, options));
    }
    if (resample) {
      samplers = register_module(kind == Kind::down ? "downsamplers" : "upsamplers", torch::nn::ModuleList());
      if (kind == Kind::down) {
        samplers->push_back(unet::Downsample2D(out_channels, /*padding=*/0, options));
      } else {
        samplers->push_back(unet::Upsample2D(out_channels, options));
      }
    }
  }

  torch::Tensor forward(torch::Tensor x) const {
    for (const auto& resnet : *resnets) x = resnet->as<VaeResnetImpl>()->forward(x);
    if (!samplers) return x;
    if (kind_ == Kind::down) return samplers->ptr(0)->as<unet::Downsample2DImpl>()->forward(x);
    return samplers->ptr(0)->as<unet::Upsample2DImpl>()->forward(x);
  }

  torch::nn::ModuleList resnets{nullptr};
  torch::nn::ModuleList samplers{nullptr};

 private:
  Kind kind_;
};
TORCH_MODULE(SamplingBlock);

torch::Tensor run_blocks(const torch::nn::ModuleList& blocks, torch::Tensor x) {
  for (const auto& block : *blocks) x = block->as<SamplingBlockImpl>()->forward(x);
  return x;
}

}  // namespace

VaeResnetImpl::VaeResnetImpl(int64_t in_channels, int64_t out_channels, int64_t groups,
                             const torch::TensorOptions& options) {
  norm1 = register_module("norm1", unet::GroupNorm(groups, in_channels, kEps, options));
  conv1 = register_module("conv1", unet::Conv2d(in_channels, out_channels, 3, 1, 1, options));
  norm2 = register_module("norm2", unet::GroupNorm(groups, out_channels, kEps, options));
  conv2 = register_module("conv2", unet::Conv2d(out_channels, out_channels, 3, 1, 1, options));
  if (in_channels != out_channels) {
    conv_shortcut = register_module("conv_shortcut", unet::Conv2d(in_channels, out_channels, 1, 1, 0, options));
  }
}

torch::Tensor VaeResnetImpl::forward(const torch::Tensor& x) const {
  torch::Tensor h = conv1->forward(norm1->forward_silu(x));
  h = conv2->forward(norm2->forward_silu(h));
  const torch::Tensor shortcut = conv_shortcut ? conv_shortcut->forward(x) : x;
  return shortcut.to(h.scalar_type()) + h;
}

VaeAttentionImpl::VaeAttentionImpl(int64_t channels, int64_t groups, const torch::TensorOptions& options) {
  group_norm = register_module("group_norm", unet::GroupNorm(groups, channels, kEps, options));
  to_q = register_module("to_q", unet::Linear(channels, channels, true, options));
  to_k = register_module("to_k", unet::Linear(channels, channels, true, options));
  to_v = register_module("to_v", unet::Linear(channels, channels, true, options));
  to_out = register_module("to_out", torch::nn::ModuleList());
  to_out->push_back(unet::Linear(channels, channels, true, options));
}

torch::Tensor VaeAttentionImpl::forward(const torch::Tensor& x) const {
  const int64_t batch = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  const torch::Tensor h = group_norm->forward(x).view({batch, channels, height * width}).transpose(1, 2);
  const torch::Tensor q = to_q->forward(h), k = to_k->forward(h), v = to_v->forward(h);
  const torch::Tensor scores = torch::matmul(q, k.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(channels)));
  const torch::Tensor weights = torch::softmax(scores.to(torch::kFloat), -1).to(v.scalar_type());
  const torch::Tensor out = to_out->ptr(0)->as<unet::LinearImpl>()->forward(torch::matmul(weights, v));
  // contiguous: the transposed view is channels-last in memory, and the next group norm needs one layout
  // (for non-square pictures the sum with x kept a mixed stride pattern the CPU kernel refuses).
  return out.transpose(1, 2).reshape({batch, channels, height, width}).contiguous().to(x.scalar_type()) + x;
}

VaeMidBlockImpl::VaeMidBlockImpl(const VaeConfig& config, const torch::TensorOptions& options) {
  const int64_t channels = config.block_out_channels.back();
  resnets = register_module("resnets", torch::nn::ModuleList());
  resnets->push_back(VaeResnet(channels, channels, config.norm_num_groups, options));
  if (config.mid_block_add_attention) {
    attentions = register_module("attentions", torch::nn::ModuleList());
    attentions->push_back(VaeAttention(channels, config.norm_num_groups, options));
  }
  resnets->push_back(VaeResnet(channels, channels, config.norm_num_groups, options));
}

torch::Tensor VaeMidBlockImpl::forward(const torch::Tensor& x) const {
  torch::Tensor h = resnets->ptr(0)->as<VaeResnetImpl>()->forward(x);
  if (attentions) h = attentions->ptr(0)->as<VaeAttentionImpl>()->forward(h);
  return resnets->ptr(1)->as<VaeResnetImpl>()->forward(h);
}

VaeEncoderImpl::VaeEncoderImpl(const VaeConfig& config, const torch::TensorOptions& options) {
  const auto& channels = config.block_out_channels;
  conv_in = register_module("conv_in", unet::Conv2d(config.in_channels, channels[0], 3, 1, 1, options));
  down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  for (size_t i = 0; i < channels.size(); ++i) {
    const int64_t in = i == 0 ? channels[0] : channels[i - 1];
    down_blocks->push_back(SamplingBlock(SamplingBlockImpl::Kind::down, in, channels[i], config.layers_per_block,
                                         i + 1 < channels.size(), config.norm_num_groups, options));
  }
  mid_block = register_module("mid_block", VaeMidBlock(config, options));
  conv_norm_out = register_module("conv_norm_out", unet::GroupNorm(config.norm_num_groups, channels.back(), kEps, options));
  conv_out = register_module("conv_out", unet::Conv2d(channels.back(), 2 * config.latent_channels, 3, 1, 1, options));
}

torch::Tensor VaeEncoderImpl::forward(const torch::Tensor& x) const {
  const torch::Tensor h = mid_block->forward(run_blocks(down_blocks, conv_in->forward(x)));
  return conv_out->forward(conv_norm_out->forward_silu(h));
}

VaeDecoderImpl::VaeDecoderImpl(const VaeConfig& config, const torch::TensorOptions& options) {
  const std::vector<int64_t> reversed(config.block_out_channels.rbegin(), config.block_out_channels.rend());
  conv_in = register_module("conv_in", unet::Conv2d(config.latent_channels, reversed[0], 3, 1, 1, options));
  up_blocks = register_module("up_blocks", torch::nn::ModuleList());  // before mid_block, as diffusers registers them
  mid_block = register_module("mid_block", VaeMidBlock(config, options));
  for (size_t i = 0; i < reversed.size(); ++i) {
    const int64_t in = i == 0 ? reversed[0] : reversed[i - 1];
    up_blocks->push_back(SamplingBlock(SamplingBlockImpl::Kind::up, in, reversed[i], config.layers_per_block + 1,
                                       i + 1 < reversed.size(), config.norm_num_groups, options));
  }
  conv_norm_out = register_module("conv_norm_out", unet::GroupNorm(config.norm_num_groups, reversed.back(), kEps, options));
  conv_out = register_module("conv_out", unet::Conv2d(reversed.back(), config.out_channels, 3, 1, 1, options));
}

torch::Tensor VaeDecoderImpl::forward(const torch::Tensor& z) const {
  const torch::Tensor h = run_blocks(up_blocks, mid_block->forward(conv_in->forward(z)));
  return conv_out->forward(conv_norm_out->forward_silu(h));
}

torch::Tensor LatentDistribution::sample(std::optional<at::Generator> generator) const {
  const torch::TensorOptions draw = torch::TensorOptions().dtype(mean.scalar_type()).device(
      generator && generator->device().is_cpu() ? torch::Device(torch::kCPU) : mean.device());
  const torch::Tensor noise =
      (generator ? torch::randn(mean.sizes(), *generator, draw) : torch::randn(mean.sizes(), draw)).to(mean.device());
  return mean + std() * noise;
}

AutoencoderKLImpl::AutoencoderKLImpl(const VaeConfig& config, const torch::TensorOptions& options) : config_(config) {
  encoder = register_module("encoder", VaeEncoder(config, options));
  decoder = register_module("decoder", VaeDecoder(config, options));
  const int64_t latent = config.latent_channels;
  if (config.use_quant_conv) {
    quant_conv = register_module("quant_conv", unet::Conv2d(2 * latent, 2 * latent, 1, 1, 0, options));
  }
  if (config.use_post_quant_conv) {
    post_quant_conv = register_module("post_quant_conv", unet::Conv2d(latent, latent, 1, 1, 0, options));
  }
}

LatentDistribution AutoencoderKLImpl::encode(const torch::Tensor& images) const {
  ZEST_CHECK(images.dim() == 4 && images.size(1) == config_.in_channels, "the VAE encodes [B, ", config_.in_channels,
             ", H, W] images, got ", images.sizes());
  const int64_t factor = int64_t{1} << (config_.block_out_channels.size() - 1);
  ZEST_CHECK(images.size(2) % factor == 0 && images.size(3) % factor == 0, "the VAE needs image sides that are multiples of ",
             factor, ", got ", images.size(2), "x", images.size(3));
  torch::Tensor moments = encoder->forward(images);
  if (quant_conv) moments = quant_conv->forward(moments);
  const auto halves = moments.chunk(2, 1);
  return LatentDistribution{halves[0], torch::clamp(halves[1], -30.0, 20.0)};
}

torch::Tensor AutoencoderKLImpl::decode(const torch::Tensor& latents) const {
  ZEST_CHECK(latents.dim() == 4 && latents.size(1) == config_.latent_channels, "the VAE decodes [B, ",
             config_.latent_channels, ", h, w] latents, got ", latents.sizes());
  const torch::Tensor z = post_quant_conv ? post_quant_conv->forward(latents) : latents;
  return decoder->forward(z);
}

torch::Tensor AutoencoderKLImpl::to_unet_latents(const torch::Tensor& z) const {
  return (z - config_.shift_factor) * config_.scaling_factor;
}

torch::Tensor AutoencoderKLImpl::from_unet_latents(const torch::Tensor& latents) const {
  return latents / config_.scaling_factor + config_.shift_factor;
}

torch::Dtype vae_compute_dtype(const VaeConfig& config, torch::Dtype requested) {
  return requested == torch::kHalf && config.force_upcast ? torch::kFloat : requested;
}

AutoencoderKL load_autoencoder_kl(const fs::path& folder, const torch::TensorOptions& options) {
  const fs::path config_path = folder / "config.json";
  const std::string source = printable(config_path.string());
  const VaeConfig vae_config = VaeConfig::from_json(read_json_file(config_path.string(), "VAE config (config.json)"), source);
  std::string widths;
  for (const int64_t c : vae_config.block_out_channels) widths += (widths.empty() ? "" : ", ") + std::to_string(c);
  check_module_fits_host(source, str("block_out_channels = [", widths, "], layers_per_block = ", vae_config.layers_per_block),
                         *AutoencoderKL(vae_config, torch::TensorOptions().device(torch::kMeta)),
                         static_cast<int64_t>(options.dtype().itemsize()));
  const fs::path weights_path = folder / kWeightsName;
  if (!fs::exists(weights_path)) {
    ZEST_FAIL(weights_path.string(), ": not found; zest reads VAE weights from ", kWeightsName,
              " (for a variant such as diffusion_pytorch_model.fp16.safetensors, point a copy or link of that name at it)");
  }
  AutoencoderKL model(vae_config, options);
  load_state_dict(*model, safetensors::Reader(weights_path.string()));  // strict: errors name the file and keys
  return model;
}

}  // namespace zest::vae
