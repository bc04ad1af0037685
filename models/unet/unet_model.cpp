// UNet2DConditionModel: construction in diffusers' order, the unit plan, and the unit-by-unit forward.
#include "models/unet/unet_model.h"

#include "core/check.h"
#include "models/common/contiguous_grad.h"

#include <optional>
#include <utility>

namespace zest::unet {

namespace {

// One step of a block's forward: resnets.j or attentions.j.
struct BlockStep {
  bool is_attention;
  size_t index;
};

// A block's resnets and attentions in forward order: r0 a0 r1 a1 … (mid block: r0 a0 r1).
std::vector<BlockStep> block_steps(const UNetBlockImpl& block) {
  std::vector<BlockStep> steps;
  const size_t attentions = block.attentions().size();
  for (size_t j = 0; j < block.resnets().size(); ++j) {
    steps.push_back({false, j});
    if (j < attentions) steps.push_back({true, j});
  }
  return steps;
}

std::string step_name(const std::string& block_prefix, const BlockStep& step) {
  return str(block_prefix, step.is_attention ? "attentions." : "resnets.", step.index);
}

// y, or {y, down(y)} when the downsampler is folded into this unit (both are skips).
Tensors with_downsampler(const Downsample2D& down, const torch::Tensor& y) {
  if (down) return {y, down->forward(y)};
  return {y};
}

}  // namespace

UNet2DConditionModel::UNet2DConditionModel(UNetConfig config, const torch::TensorOptions& options)
    : config_(std::move(config)) {
  config_.validate();
  const auto& c = config_;
  const int64_t c0 = c.block_out_channels[0];
  const size_t n = c.levels();
  // diffusers constructs (= draws) conv_in, time_embedding, add_embedding, down, mid, up, out, but
  // registers down_blocks and up_blocks before mid_block: the state dict lists up before mid.
  conv_in = register_module(
      "conv_in", Conv2d(c.in_channels, c0, c.conv_in_kernel, 1, (c.conv_in_kernel - 1) / 2, options));
  time_embedding_ = register_module(
      "time_embedding",
      TimestepEmbedding(c0, c.time_embed_dim(), c.act_fn, c.timestep_post_act, options));
  if (c.text_time_embedding) {
    add_embedding_ = register_module(
        "add_embedding", TimestepEmbedding(c.projection_class_embeddings_input_dim, c.time_embed_dim(),
                                           Act::silu, std::nullopt, options));
  }
  auto down_list = register_module("down_blocks", torch::nn::ModuleList());
  auto up_list = register_module("up_blocks", torch::nn::ModuleList());
  for (size_t i = 0; i < n; ++i) {
    down_blocks_.push_back(make_down_block(c, i, options));
    down_list->push_back(down_blocks_.back());
  }
  auto mid = make_mid_block(c, options);
  for (size_t i = 0; i < n; ++i) {
    up_blocks_.push_back(make_up_block(c, i, options));
    up_list->push_back(up_blocks_.back());
  }
  mid_block_ = register_module("mid_block", mid);
  conv_norm_out =
      register_module("conv_norm_out", GroupNorm(c.norm_num_groups, c0, c.norm_eps, options));
  conv_out = register_module("conv_out", Conv2d(c0, c.out_channels, c.conv_out_kernel, 1,
                                                (c.conv_out_kernel - 1) / 2, options));
}

std::vector<UnitDecl> UNet2DConditionModel::unit_decls() const {
  std::vector<UnitDecl> units;
  units.push_back({"embed", {"conv_in.", "time_embedding."}});
  if (add_embedding_) units.back().prefixes.push_back("add_embedding.");
  const auto add_block = [&units](const std::string& prefix, const UNetBlockImpl& block) {
    for (const auto& step : block_steps(block)) {
      const auto name = step_name(prefix, step);
      units.push_back({name, {name + "."}});
    }
    if (block.downsampler()) units.back().prefixes.push_back(prefix + "downsamplers.");
    if (block.upsampler()) units.back().prefixes.push_back(prefix + "upsamplers.");
  };
  for (size_t i = 0; i < down_blocks_.size(); ++i) add_block(str("down_blocks.", i, "."), *down_blocks_[i]);
  add_block("mid_block.", *mid_block_);
  for (size_t i = 0; i < up_blocks_.size(); ++i) add_block(str("up_blocks.", i, "."), *up_blocks_[i]);
  units.push_back({"out", {"conv_norm_out.", "conv_out."}});
  return units;
}

torch::Tensor UNet2DConditionModel::embed_timesteps(const torch::Tensor& timesteps,
                                                    torch::ScalarType dtype) const {
  const auto& c = config_;
  const auto sinusoid =
      timestep_embedding(timesteps, c.block_out_channels[0], c.flip_sin_to_cos, c.freq_shift);
  return time_embedding_->forward(sinusoid.to(dtype));
}

torch::Tensor UNet2DConditionModel::embed_added_conditions(const torch::Tensor& text_embeds,
                                                           const torch::Tensor& time_ids,
                                                           torch::ScalarType dtype) const {
  const auto& c = config_;
  ZEST_CHECK(add_embedding_, "UNet: this configuration has no addition_embed_type = \"text_time\"");
  const auto time_embeds =
      timestep_embedding(time_ids.flatten(), c.addition_time_embed_dim, c.flip_sin_to_cos, c.freq_shift)
          .reshape({text_embeds.size(0), -1});
  return add_embedding_->forward(torch::cat({text_embeds, time_embeds}, -1).to(dtype));
}

Tensors UNet2DConditionModel::embed(const Tensors& in) const {
  auto sample = in[0];
  if (config_.center_input_sample) sample = 2 * sample - 1.0;
  auto temb = embed_timesteps(in[1], sample.scalar_type());
  if (add_embedding_) temb = temb + embed_added_conditions(in[2], in[3], temb.scalar_type());
  if (config_.time_embedding_act_fn) temb = activate(*config_.time_embedding_act_fn, temb);
  return {conv_in->forward(sample.contiguous(activation_layout(sample))), temb};
}

at::MemoryFormat UNet2DConditionModel::activation_layout(const torch::Tensor& sample) const {
  return channels_last_.value_or(sample.is_cuda()) ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

torch::Tensor UNet2DConditionModel::out(const torch::Tensor& h) const {
  const bool is_silu = config_.act_fn == Act::silu;
  return conv_out->forward(is_silu ? conv_norm_out->forward_silu(h) : activate(config_.act_fn, conv_norm_out->forward(h)));
}

torch::Tensor UNet2DConditionModel::forward(const torch::Tensor& sample, const torch::Tensor& timestep,
                                            const UNetConditioning& cond) {
  check_inputs(sample, cond);
  const int64_t batch = sample.size(0);
  auto timesteps = timestep.dim() == 0 ? timestep.reshape({1}) : timestep;
  ZEST_CHECK(timesteps.dim() == 1 && (timesteps.size(0) == 1 || timesteps.size(0) == batch),
             "UNet: timestep must be a scalar or have shape [", batch, "], got ", timestep.sizes());
  timesteps = timesteps.to(sample.device()).expand({batch});

  const auto embedded = run_unit("embed", [this](const Tensors& in) { return embed(in); },
                                 {sample, timesteps, cond.text_embeds, cond.time_ids});
  auto h = embedded[0];
  const auto& temb = embedded[1];
  const auto& context = cond.encoder_hidden_states;
  // Inputs that are not a multiple of the total up factor make each upsampler resize to its skip.
  const int64_t up_factor = int64_t{1} << (config_.levels() - 1);
  const bool is_upsample_to_skip_size = sample.size(2) % up_factor != 0 || sample.size(3) % up_factor != 0;

  std::vector<torch::Tensor> skips{h};
  for (size_t i = 0; i < down_blocks_.size(); ++i) h = run_down_block(i, h, temb, context, skips);
  h = run_mid_block(h, temb, context);
  for (size_t i = 0; i < up_blocks_.size(); ++i) {
    h = run_up_block(i, h, temb, context, skips, is_upsample_to_skip_size);
  }
  return run_unit("out", [this](const Tensors& in) { return Tensors{out(in[0])}; }, {h})[0];
}

// Unit lambdas capture module holders by value (the engine may re-run them during backward).
torch::Tensor UNet2DConditionModel::run_down_block(size_t level, torch::Tensor h,
                                                   const torch::Tensor& temb,
                                                   const torch::Tensor& context,
                                                   std::vector<torch::Tensor>& skips) {
  const auto& block = *down_blocks_[level];
  const auto prefix = str("down_blocks.", level, ".");
  const auto steps = block_steps(block);
  for (size_t s = 0; s < steps.size(); ++s) {
    const Downsample2D down = s + 1 == steps.size() ? block.downsampler() : nullptr;
    Tensors outs;
    if (!steps[s].is_attention) {
      outs = run_unit(step_name(prefix, steps[s]),
                      [resnet = block.resnets()[steps[s].index], down](const Tensors& in) {
                        return with_downsampler(down, resnet->forward(in[0], in[1]));
                      },
                      {h, temb});
    } else {
      outs = run_unit(step_name(prefix, steps[s]),
                      [attention = block.attentions()[steps[s].index], down](const Tensors& in) {
                        return with_downsampler(down, attention->forward(in[0], in[1]));
                      },
                      {h, context});
    }
    h = outs.back();
    // A resnet followed by an attention hands over; otherwise the block's output is a skip.
    const bool is_handover = s + 1 < steps.size() && steps[s + 1].is_attention;
    if (!is_handover) skips.insert(skips.end(), outs.begin(), outs.end());
  }
  return h;
}

torch::Tensor UNet2DConditionModel::run_mid_block(torch::Tensor h, const torch::Tensor& temb,
                                                  const torch::Tensor& context) {
  const auto& block = *mid_block_;
  for (const auto& step : block_steps(block)) {
    if (!step.is_attention) {
      h = run_unit(step_name("mid_block.", step),
                   [resnet = block.resnets()[step.index]](const Tensors& in) {
                     return Tensors{resnet->forward(in[0], in[1])};
                   },
                   {h, temb})[0];
    } else {
      h = run_unit(step_name("mid_block.", step),
                   [attention = block.attentions()[step.index]](const Tensors& in) {
                     return Tensors{attention->forward(in[0], in[1])};
                   },
                   {h, context})[0];
    }
  }
  return h;
}

torch::Tensor UNet2DConditionModel::run_up_block(size_t up_level, torch::Tensor h,
                                                 const torch::Tensor& temb,
                                                 const torch::Tensor& context,
                                                 std::vector<torch::Tensor>& skips,
                                                 bool is_upsample_to_skip_size) {
  const auto& block = *up_blocks_[up_level];
  const auto prefix = str("up_blocks.", up_level, ".");
  const size_t resnets = block.resnets().size();
  ZEST_CHECK(skips.size() >= resnets, "UNet: ", prefix, " needs ", resnets, " skips, ", skips.size(),
             " left");
  // As diffusers: resize to the first skip of the next up block (the one left on the stack).
  std::optional<std::vector<int64_t>> size;
  if (block.upsampler() && is_upsample_to_skip_size) {
    ZEST_CHECK(skips.size() > resnets, "UNet: ", prefix, " has no skip left to size its upsampler");
    const auto& next = skips[skips.size() - resnets - 1];
    size = std::vector<int64_t>{next.size(2), next.size(3)};
  }
  const auto steps = block_steps(block);
  for (size_t s = 0; s < steps.size(); ++s) {
    const Upsample2D up = s + 1 == steps.size() ? block.upsampler() : nullptr;
    const auto upsampled = [up, size](const torch::Tensor& y) {
      return up ? up->forward(y, size) : y;
    };
    if (!steps[s].is_attention) {
      const auto skip = skips.back();
      skips.pop_back();
      h = run_unit(step_name(prefix, steps[s]),
                   [resnet = block.resnets()[steps[s].index], upsampled](const Tensors& in) {
                     // The join's backward hands on channel slices (strided in channels-last): each is
                     // made contiguous once here, not by every op its gradient reaches.
                     const auto joined = torch::cat({contiguous_grad(in[0]), contiguous_grad(in[1])}, 1);
                     return Tensors{upsampled(resnet->forward(joined, in[2]))};
                   },
                   {h, skip, temb})[0];
    } else {
      h = run_unit(step_name(prefix, steps[s]),
                   [attention = block.attentions()[steps[s].index], upsampled](const Tensors& in) {
                     return Tensors{upsampled(attention->forward(in[0], in[1]))};
                   },
                   {h, context})[0];
    }
  }
  return h;
}

void UNet2DConditionModel::check_inputs(const torch::Tensor& sample, const UNetConditioning& cond) const {
  const auto& c = config_;
  ZEST_CHECK(sample.defined() && sample.dim() == 4 && sample.size(1) == c.in_channels,
             "UNet: sample must be [B, ", c.in_channels, ", H, W], got ",
             sample.defined() ? sample.sizes() : torch::IntArrayRef{});
  const auto& ehs = cond.encoder_hidden_states;
  ZEST_CHECK(ehs.defined() && ehs.dim() == 3 && ehs.size(0) == sample.size(0),
             "UNet: encoder_hidden_states must be [B, S, D] with B = ", sample.size(0));
  if (!c.text_time_embedding) return;
  ZEST_CHECK(cond.text_embeds.defined() && cond.time_ids.defined(),
             "UNet: addition_embed_type \"text_time\" needs text_embeds and time_ids");
  const int64_t width =
      cond.text_embeds.size(-1) + cond.time_ids.size(-1) * c.addition_time_embed_dim;
  ZEST_CHECK(width == c.projection_class_embeddings_input_dim,
             "UNet: text_embeds width + time_ids count · addition_time_embed_dim = ", width,
             ", but projection_class_embeddings_input_dim = ", c.projection_class_embeddings_input_dim);
}

int64_t count_parameters(const UNetConfig& config) {
  const UNet2DConditionModel model(config, torch::TensorOptions().device(torch::kMeta));
  int64_t total = 0;
  for (const auto& p : model.parameters()) total += p.numel();
  return total;
}

}  // namespace zest::unet
