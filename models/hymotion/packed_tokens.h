// HY-Motion's valid tokens packed: the rows of each sample's valid motion frames and valid text tokens,
// one sample after another, with no padding. Padded frames and text tokens reach nothing the loss sees
// (the attention bias closes them as keys, the loss masks padded frames, the final layer reads motion
// only), so the blocks can skip them: every per-token product and norm then runs over the valid tokens
// alone, and only the attention works in the padded layout (its q/k/v scattered there, its output gathered
// back). The kernel switch `packed_tokens` turns it on for the training loss.
#pragma once

#include "kernels/kernel_tensors.h"

#include <torch/torch.h>

namespace zest::hymotion {

struct PackedTokens {
  int64_t batch = 0, motion_len = 0, text_len = 0;
  // Index tensors (int64, on the masks' device), each ascending:
  torch::Tensor motion_rows;        // [Nm]: the valid frames' rows of [B·L]
  torch::Tensor text_rows;          // [Nt]: the valid text tokens' rows of [B·T]
  torch::Tensor joint_rows;         // [Nm + Nt]: rows of the joined [B·(L + T)] layout, a sample's frames then its tokens
  torch::Tensor streams_in_joint;   // [Nm + Nt]: the joined layout's rows of the valid frames, then of the valid
                                    // text tokens (the double blocks' two streams, gathered at once)
  torch::Tensor joint_from_streams; // [Nm + Nt]: for each joint row, its row of cat(motion rows, text rows)
  torch::Tensor motion_of_joint;    // [Nm]: the packed joint rows that are motion frames, in motion order
  SampleRows motion, text, joint;   // each packing's samples (kernels/kernel_tensors.h)

  int64_t joint_len() const { return motion_len + text_len; }
};

// From x_mask_temporal [B, L] and ctxt_mask_temporal [B, T] (any nonzero = valid, any pattern). The masks are
// read on the host: one wait for the device when they live there.
PackedTokens pack_tokens(const torch::Tensor& x_valid, const torch::Tensor& ctxt_valid);

// Whether the training loss packs: the kernel switch `packed_tokens` (core/kernel_switches.cpp).
bool packed_tokens_enabled();
void set_packed_tokens(bool on);

}  // namespace zest::hymotion
