// UNet2DConditionModel (diffusers; Stable Diffusion 1.5 / SDXL): the module tree with the reference
// state-dict names and order, its engine units, and the forward pass run unit by unit.
#pragma once

#include "engine/unit_module.h"
#include "models/unet/layers.h"
#include "models/unet/resnet.h"
#include "models/unet/unet_blocks.h"
#include "models/unet/unet_config.h"

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

namespace zest::unet {

// What the UNet is conditioned on besides the timestep.
struct UNetConditioning {
  torch::Tensor encoder_hidden_states;  // [B, S, cross_attention_dim]
  torch::Tensor text_embeds;            // [B, text width], "text_time" models (SDXL) only
  torch::Tensor time_ids;               // [B, 6], "text_time" models only
};

// Units, in forward order: "embed" (conv_in, time_embedding, add_embedding), one unit per resnet and
// per attention of every down, mid and up block, named by its state-dict prefix (e.g.
// "down_blocks.0.attentions.1"); a block's down/upsampler is folded into the block's last unit; "out"
// (conv_norm_out, conv_out).
class UNet2DConditionModel : public UnitModule {
 public:
  // Builds and initialises like torch.nn (global CPU generator, construction order as diffusers');
  // on the meta device nothing is allocated.
  explicit UNet2DConditionModel(UNetConfig config,
                                const torch::TensorOptions& options = torch::TensorOptions());

  std::vector<UnitDecl> unit_decls() const override;

  // sample [B, in_channels, H, W]; timestep int or float, a scalar or [B]. Returns [B, out_channels, H, W].
  torch::Tensor forward(const torch::Tensor& sample, const torch::Tensor& timestep,
                        const UNetConditioning& cond);

  const UNetConfig& config() const { return config_; }
  // The activations' memory layout: channels-last (NHWC strides, cuDNN's native layout for tensor-core
  // convolutions, so no layout conversion runs around each convolution and the attention blocks' token
  // view is free) on CUDA, NCHW elsewhere, unless set here. Values are the same either way.
  void set_channels_last(std::optional<bool> channels_last) { channels_last_ = channels_last; }
  at::MemoryFormat activation_layout(const torch::Tensor& sample) const;
  // The embedding pieces "embed" runs, on their own (also for diagnostics). timesteps [B] →
  // time_embedding(sinusoid) [B, temb]; the "text_time" add embedding of [text_embeds ; sinusoids of
  // every time id] [B, temb]. `dtype`: the activation dtype the float32 sinusoids are cast to.
  torch::Tensor embed_timesteps(const torch::Tensor& timesteps, torch::ScalarType dtype) const;
  torch::Tensor embed_added_conditions(const torch::Tensor& text_embeds, const torch::Tensor& time_ids,
                                       torch::ScalarType dtype) const;

 private:
  Tensors embed(const Tensors& in) const;   // {sample, timesteps, text_embeds, time_ids} → {h, temb}
  torch::Tensor out(const torch::Tensor& h) const;
  torch::Tensor run_down_block(size_t level, torch::Tensor h, const torch::Tensor& temb,
                               const torch::Tensor& context, std::vector<torch::Tensor>& skips);
  torch::Tensor run_mid_block(torch::Tensor h, const torch::Tensor& temb, const torch::Tensor& context);
  torch::Tensor run_up_block(size_t up_level, torch::Tensor h, const torch::Tensor& temb,
                             const torch::Tensor& context, std::vector<torch::Tensor>& skips,
                             bool is_upsample_to_skip_size);
  void check_inputs(const torch::Tensor& sample, const UNetConditioning& cond) const;

  UNetConfig config_;
  std::optional<bool> channels_last_;  // unset: on CUDA only
  Conv2d conv_in{nullptr};
  TimestepEmbedding time_embedding_{nullptr};
  TimestepEmbedding add_embedding_{nullptr};  // "text_time" models only
  std::vector<UNetBlock> down_blocks_;
  std::vector<UNetBlock> up_blocks_;
  UNetBlock mid_block_{nullptr};
  GroupNorm conv_norm_out{nullptr};
  Conv2d conv_out{nullptr};
};

// Number of elements of every parameter of `config`, counted on the meta device (no allocation).
int64_t count_parameters(const UNetConfig& config);

}  // namespace zest::unet
