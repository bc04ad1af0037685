// HyMotionModel: HunyuanMotionMMDiT (HY-Motion 1.0) as a zest UnitModule, parameter names identical to
// the reference state dict; units = embed, text_refiner, each double block, each single block, final_layer.
#pragma once

#include "engine/unit_module.h"
#include "models/hymotion/hymotion_config.h"
#include "models/hymotion/layers.h"
#include "models/hymotion/mmdit_blocks.h"
#include "models/hymotion/token_refiner.h"

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace zest::hymotion {

// Forward inputs, named as in the reference signature.
struct HyMotionInputs {
  torch::Tensor x;                   // [B, L, input_dim] noisy motion x_t
  torch::Tensor ctxt_input;          // [B, T, ctxt_input_dim] LLM token features
  torch::Tensor vtxt_input;          // [B, 1, vtxt_input_dim] pooled CLIP feature
  torch::Tensor timesteps;           // [B] flow time in [0, 1]
  torch::Tensor x_mask_temporal;     // [B, L] bool, true = valid frame
  torch::Tensor ctxt_mask_temporal;  // [B, T] bool, true = valid token
  // The caller reads the valid frames' outputs only (the training loss): with the kernel switch
  // `packed_tokens` on, the blocks then run over the valid tokens alone (packed_tokens.h) and the outputs of
  // the frames not kept are zero.
  bool valid_frames_only = false;
  // With valid_frames_only: the packing made ahead of the step (add_packed_tokens); null = pack the masks here.
  std::shared_ptr<const PackedTokens> packed;
};

class HyMotionModel : public UnitModule {
 public:
  // Parameters initialised as the reference does (same draw order, so torch::manual_seed(s) reproduces
  // the reference's torch.manual_seed(s) init); on a meta Init nothing is allocated.
  explicit HyMotionModel(HyMotionConfig config, const Init& init = {});

  std::vector<UnitDecl> unit_decls() const override;
  // Predicted velocity [B, L, output_dim]. With `debug`, the reference's intermediate activations are
  // stored under the golden files' debug names (input_encoder, adapter, double_blocks.0.motion, ...).
  torch::Tensor forward(const HyMotionInputs& in, std::map<std::string, torch::Tensor>* debug = nullptr);

  const HyMotionConfig& config() const { return config_; }

 private:
  void check_inputs(const HyMotionInputs& in) const;
  // Attention bias and RoPE tables shared by every block of one forward.
  AttnContext attention_context(const HyMotionInputs& in) const;
  // One run_unit() call each; see forward().
  Tensors run_embed(const HyMotionInputs& in, bool want_debug);
  torch::Tensor run_refiner(const torch::Tensor& ctxt, const torch::Tensor& timesteps,
                            const torch::Tensor& ctxt_valid);
  std::pair<torch::Tensor, torch::Tensor> run_double(size_t i, const torch::Tensor& motion,
                                                     const torch::Tensor& ctxt, const torch::Tensor& adapter,
                                                     const AttnContext& ctx);
  torch::Tensor run_single(size_t i, const torch::Tensor& z, const torch::Tensor& adapter,
                           const AttnContext& ctx);
  torch::Tensor forward_packed(const HyMotionInputs& in, const torch::Tensor& motion_embedded,
                               const torch::Tensor& ctxt_refined, const torch::Tensor& adapter, AttnContext ctx);

  HyMotionConfig config_;
  std::shared_ptr<RopeTables> rope_tables_ = std::make_shared<RopeTables>();
  Linear input_encoder_{nullptr};
  Linear ctxt_encoder_{nullptr};
  MlpEncoder vtxt_encoder_{nullptr};
  TimestepEncoder timestep_encoder_{nullptr};
  TokenRefiner text_refiner_{nullptr};  // null when text_refiner_module = ""
  std::vector<DoubleBlock> double_blocks_;
  std::vector<SingleBlock> single_blocks_;
  FinalLayer final_layer_{nullptr};
};

// Every parameter's state-dict name and shape, in order, computed on the meta device (no allocation).
std::vector<std::pair<std::string, std::vector<int64_t>>> state_dict_shapes(const HyMotionConfig& config);
// Exact number of parameters of a configuration, without allocating them.
int64_t count_parameters(const HyMotionConfig& config);

}  // namespace zest::hymotion
