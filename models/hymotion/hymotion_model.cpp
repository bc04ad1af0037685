// HunyuanMotionMMDiT forward (docs/models.md 1.5): embed → text refiner → double blocks → single blocks →
// final layer, each unit run through run_unit() as a pure function of its tensor inputs.
#include "models/hymotion/hymotion_model.h"

#include "core/check.h"
#include "models/hymotion/attention_mask.h"
#include "models/common/packed_rows.h"

#include <tuple>

namespace zest::hymotion {
namespace {

void check_shape(const torch::Tensor& t, const char* name, std::vector<int64_t> expected) {
  ZEST_CHECK(t.defined(), "HY-Motion forward: input ", name, " is missing");
  bool ok = t.dim() == static_cast<int64_t>(expected.size());
  for (size_t i = 0; ok && i < expected.size(); ++i) ok = expected[i] < 0 || t.size(i) == expected[i];
  ZEST_CHECK(ok, "HY-Motion forward: input ", name, " has shape ", t.sizes(), ", expected ",
             c10::IntArrayRef(expected), " (-1 = any)");
}

void store(std::map<std::string, torch::Tensor>* debug, const std::string& name, const torch::Tensor& t) {
  if (debug) (*debug)[name] = t.detach();
}

}  // namespace

HyMotionModel::HyMotionModel(HyMotionConfig config, const Init& init) : config_(std::move(config)) {
  config_.validate();
  const HyMotionConfig& c = config_;
  const int64_t dim = c.feat_dim;
  // Registration order = the reference's state-dict order and parameter-init draw order.
  input_encoder_ = register_module("input_encoder", Linear(c.input_dim, dim, true, init));
  ctxt_encoder_ = register_module("ctxt_encoder", Linear(c.ctxt_input_dim, dim, true, init));
  vtxt_encoder_ = register_module("vtxt_encoder", MlpEncoder(c.vtxt_input_dim, dim, Act::silu, init));
  timestep_encoder_ = register_module("timestep_encoder", TimestepEncoder(dim, Act::silu, c.time_factor, init));
  if (c.refiner.enabled) text_refiner_ = register_module("text_refiner", TokenRefiner(c, init));
  auto doubles = register_module("double_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_double_blocks(); ++i) {
    double_blocks_.push_back(DoubleBlock(c, init));
    doubles->push_back(double_blocks_.back());
  }
  auto singles = register_module("single_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_single_blocks(); ++i) {
    single_blocks_.push_back(SingleBlock(c, init));
    singles->push_back(single_blocks_.back());
  }
  final_layer_ = register_module("final_layer", FinalLayer(c, init));
}

std::vector<UnitDecl> HyMotionModel::unit_decls() const {
  std::vector<UnitDecl> units;
  units.push_back({"embed", {"input_encoder.", "ctxt_encoder.", "vtxt_encoder.", "timestep_encoder."}});
  if (config_.refiner.enabled) units.push_back({"text_refiner", {"text_refiner."}});
  for (int64_t i = 0; i < config_.num_double_blocks(); ++i) {
    const std::string name = "double_blocks." + std::to_string(i);
    units.push_back({name, {name + "."}});
  }
  for (int64_t i = 0; i < config_.num_single_blocks(); ++i) {
    const std::string name = "single_blocks." + std::to_string(i);
    units.push_back({name, {name + "."}});
  }
  units.push_back({"final_layer", {"final_layer."}});
  return units;
}

void HyMotionModel::check_inputs(const HyMotionInputs& in) const {
  check_shape(in.x, "x", {-1, -1, config_.input_dim});
  const int64_t batch = in.x.size(0), motion_len = in.x.size(1);
  check_shape(in.ctxt_input, "ctxt_input", {batch, -1, config_.ctxt_input_dim});
  check_shape(in.vtxt_input, "vtxt_input", {batch, 1, config_.vtxt_input_dim});
  check_shape(in.timesteps, "timesteps", {batch});
  check_shape(in.x_mask_temporal, "x_mask_temporal", {batch, motion_len});
  check_shape(in.ctxt_mask_temporal, "ctxt_mask_temporal", {batch, in.ctxt_input.size(1)});
}

// Unit lambdas capture `this` and values only: a checkpointing runner calls them again during backward,
// after forward() has returned.
Tensors HyMotionModel::run_embed(const HyMotionInputs& in, bool want_debug) {
  return run_unit(
      "embed",
      [this, want_debug](const Tensors& t) {
        const auto motion = input_encoder_->forward(t[0]);
        const auto tfeat = timestep_encoder_->forward(t[3]);
        const auto vfeat = vtxt_encoder_->forward(t[2].to(torch::kFloat32));  // reference casts text to f32
        const auto ctxt = ctxt_encoder_->forward(t[1].to(torch::kFloat32));
        if (want_debug) return Tensors{motion, tfeat + vfeat, ctxt, tfeat, vfeat};
        return Tensors{motion, tfeat + vfeat, ctxt};
      },
      {in.x, in.ctxt_input, in.vtxt_input, in.timesteps});
}

torch::Tensor HyMotionModel::run_refiner(const torch::Tensor& ctxt, const torch::Tensor& timesteps,
                                         const torch::Tensor& ctxt_valid) {
  return run_unit(
      "text_refiner", [this](const Tensors& t) { return Tensors{text_refiner_->forward(t[0], t[1], t[2])}; },
      {ctxt, timesteps, ctxt_valid})[0];
}

std::pair<torch::Tensor, torch::Tensor> HyMotionModel::run_double(size_t i, const torch::Tensor& motion,
                                                                  const torch::Tensor& ctxt,
                                                                  const torch::Tensor& adapter,
                                                                  const AttnContext& ctx) {
  const auto out = run_unit(
      "double_blocks." + std::to_string(i),
      [block = double_blocks_[i], packed = ctx.packed](const Tensors& t) {
        auto [m, c] = block->forward(t[0], t[1], t[2], AttnContext{t[3], t[4], t[5], packed});
        return Tensors{m, c};
      },
      {motion, ctxt, adapter, ctx.bias, ctx.cos, ctx.sin});
  return {out[0], out[1]};
}

torch::Tensor HyMotionModel::run_single(size_t i, const torch::Tensor& z, const torch::Tensor& adapter,
                                        const AttnContext& ctx) {
  return run_unit(
      "single_blocks." + std::to_string(i),
      [block = single_blocks_[i], packed = ctx.packed](const Tensors& t) {
        return Tensors{block->forward(t[0], t[1], AttnContext{t[2], t[3], t[4], packed})};
      },
      {z, adapter, ctx.bias, ctx.cos, ctx.sin})[0];
}

AttnContext HyMotionModel::attention_context(const HyMotionInputs& in) const {
  const int64_t motion_len = in.x.size(1), text_len = in.ctxt_input.size(1);
  AttnContext ctx;
  ctx.bias = mmdit_attention_bias(in.x_mask_temporal, in.ctxt_mask_temporal, config_.mask_mode,
                                  config_.narrowband_window());
  // RoPE over the whole [motion ; text] sequence, or only the motion tokens when the flag is set.
  const auto rope = rope_tables_->on(config_.apply_rope_to_single_branch ? motion_len : motion_len + text_len,
                                     config_.head_dim(), in.x.device());
  ctx.cos = rope.cos;
  ctx.sin = rope.sin;
  return ctx;
}

torch::Tensor HyMotionModel::forward(const HyMotionInputs& in, std::map<std::string, torch::Tensor>* debug) {
  check_inputs(in);
  const int64_t motion_len = in.x.size(1);

  const auto embedded = run_embed(in, debug != nullptr);
  auto motion = embedded[0], adapter = embedded[1], ctxt = embedded[2];
  store(debug, "input_encoder", motion);
  store(debug, "ctxt_encoder", ctxt);
  if (debug) {
    store(debug, "timestep_encoder", embedded[3]);
    store(debug, "vtxt_encoder", embedded[4]);
  }
  store(debug, "adapter", adapter);

  if (text_refiner_) {
    ctxt = run_refiner(ctxt, in.timesteps, in.ctxt_mask_temporal.to(torch::kBool));
    store(debug, "text_refiner", ctxt);
  }

  AttnContext ctx = attention_context(in);
  store(debug, "attn_mask_double", ctx.bias);
  store(debug, "attn_mask_single", ctx.bias);  // the reference builds the same tensor twice
  // One bias in the compute dtype (0 and −inf are exact in it) for every block: converted inside each
  // block, each block's attention would keep its own copy for its backward ([B, 1, L, L] each).
  ctx.bias = ctx.bias.to(motion.scalar_type());

  if (in.valid_frames_only && debug == nullptr && packed_tokens_enabled())
    return forward_packed(in, motion, ctxt, adapter, ctx);

  for (size_t i = 0; i < double_blocks_.size(); ++i) {
    std::tie(motion, ctxt) = run_double(i, motion, ctxt, adapter, ctx);
    store(debug, "double_blocks." + std::to_string(i) + ".motion", motion);
    store(debug, "double_blocks." + std::to_string(i) + ".text", ctxt);
  }
  auto z = torch::cat({motion, ctxt}, 1);
  for (size_t i = 0; i < single_blocks_.size(); ++i) {
    z = run_single(i, z, adapter, ctx);
    store(debug, "single_blocks." + std::to_string(i), z);
  }
  return run_unit(
      "final_layer",
      [this, motion_len](const Tensors& t) {
        return Tensors{final_layer_->forward(t[0].narrow(1, 0, motion_len), t[1])};
      },
      {z, adapter})[0];
}

// The blocks over the valid tokens only (packed_tokens.h): the embedded motion and refined text packed, the
// blocks run, the final layer's rows scattered back to [B, L, output_dim] with zeros at the frames not kept.
torch::Tensor HyMotionModel::forward_packed(const HyMotionInputs& in, const torch::Tensor& motion_embedded,
                                            const torch::Tensor& ctxt_refined, const torch::Tensor& adapter,
                                            AttnContext ctx) {
  const auto p = in.packed ? in.packed
                           : std::make_shared<const PackedTokens>(pack_tokens(in.x_mask_temporal, in.ctxt_mask_temporal));
  ctx.packed = p;
  auto motion = gather_rows(motion_embedded.reshape({-1, motion_embedded.size(2)}), p->motion_rows);
  auto ctxt = gather_rows(ctxt_refined.reshape({-1, ctxt_refined.size(2)}), p->text_rows);
  for (size_t i = 0; i < double_blocks_.size(); ++i) std::tie(motion, ctxt) = run_double(i, motion, ctxt, adapter, ctx);
  auto z = gather_rows(torch::cat({motion, ctxt}, 0), p->joint_from_streams);
  for (size_t i = 0; i < single_blocks_.size(); ++i) z = run_single(i, z, adapter, ctx);
  const auto out = run_unit(
      "final_layer",
      [this, p](const Tensors& t) {
        return Tensors{final_layer_->forward(gather_rows(t[0], p->motion_of_joint), t[1], &p->motion)};
      },
      {z, adapter})[0];
  return scatter_rows(out, p->motion_rows, p->batch * p->motion_len).view({p->batch, p->motion_len, out.size(1)});
}

std::vector<std::pair<std::string, std::vector<int64_t>>> state_dict_shapes(const HyMotionConfig& config) {
  const HyMotionModel meta(config, Init{torch::TensorOptions().dtype(torch::kFloat32).device(torch::kMeta)});
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& p : meta.named_parameters()) shapes.emplace_back(p.key(), p.value().sizes().vec());
  return shapes;
}

int64_t count_parameters(const HyMotionConfig& config) {
  int64_t total = 0;
  for (const auto& [name, shape] : state_dict_shapes(config)) {
    int64_t numel = 1;
    for (const int64_t s : shape) numel *= s;
    total += numel;
  }
  return total;
}

}  // namespace zest::hymotion
