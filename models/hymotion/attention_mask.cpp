// Attention bias of the double and single blocks (the reference builds the same tensor twice, as
// _build_dmm_attn_mask_shared and _build_smm_attn_mask_shared).
#include "models/hymotion/attention_mask.h"

#include "core/check.h"

#include <limits>

namespace zest::hymotion {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Motion→motion bias [L, L] for the mask mode, or an undefined tensor for none.
torch::Tensor motion_bias(int64_t len, MaskMode mode, int64_t window, const torch::TensorOptions& f32) {
  if (mode == MaskMode::none) return {};
  const auto neg = torch::full({len, len}, kNegInf, f32);
  if (mode == MaskMode::causal) return torch::triu(neg, /*diagonal=*/1);
  const auto idx = torch::arange(len, f32.dtype(torch::kLong));
  const auto in_band = (idx.unsqueeze(0) - idx.unsqueeze(1)).abs() <= window;
  return neg.masked_fill(in_band, 0.0);
}

// 0 for valid keys, −inf for padded ones.
torch::Tensor key_padding(const torch::Tensor& valid, const torch::TensorOptions& f32) {
  return torch::zeros(valid.sizes(), f32).masked_fill(valid.to(torch::kBool).logical_not(), kNegInf);
}

}  // namespace

torch::Tensor mmdit_attention_bias(const torch::Tensor& x_valid, const torch::Tensor& ctxt_valid, MaskMode mode,
                                   int64_t window) {
  ZEST_CHECK(x_valid.dim() == 2 && ctxt_valid.dim() == 2 && x_valid.size(0) == ctxt_valid.size(0),
             "attention mask: x_mask_temporal ", x_valid.sizes(), " and ctxt_mask_temporal ", ctxt_valid.sizes(),
             " must be [B, L] and [B, T]");
  const int64_t batch = x_valid.size(0), motion_len = x_valid.size(1);
  const int64_t total = motion_len + ctxt_valid.size(1);
  const auto f32 = x_valid.options().dtype(torch::kFloat32);

  auto bias = torch::zeros({batch, 1, total, total}, f32);
  const auto band = motion_bias(motion_len, mode, window, f32);
  if (band.defined()) bias.narrow(2, 0, motion_len).narrow(3, 0, motion_len).add_(band);
  const auto keys = torch::cat({key_padding(x_valid, f32), key_padding(ctxt_valid, f32)}, 1);
  bias = bias + keys.view({batch, 1, 1, total});
  // Text queries never see motion keys.
  bias.narrow(2, motion_len, total - motion_len).narrow(3, 0, motion_len).fill_(kNegInf);
  return bias;
}

}  // namespace zest::hymotion
