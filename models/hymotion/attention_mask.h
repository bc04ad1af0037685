// The MMDiT's additive attention bias over the [motion ; text] sequence (docs/models.md 1.7): key padding,
// the motion→motion narrow band (or causal triangle), and no text→motion attention.
#pragma once

#include "models/hymotion/hymotion_config.h"

#include <torch/torch.h>

namespace zest::hymotion {

// x_valid [B, L] and ctxt_valid [B, T] (true = valid) → float32 bias [B, 1, L+T, L+T] of 0 / −inf.
// `window` is the narrow-band half width in frames (used only by MaskMode::narrowband).
torch::Tensor mmdit_attention_bias(const torch::Tensor& x_valid, const torch::Tensor& ctxt_valid, MaskMode mode,
                                   int64_t window);

}  // namespace zest::hymotion
