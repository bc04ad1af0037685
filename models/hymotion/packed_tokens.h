// HY-Motion's valid tokens packed: the rows of each sample's valid motion frames and valid text tokens,
// one sample after another, with no padding. Padded frames and text tokens reach nothing the loss sees
// (the attention bias closes them as keys, the loss masks padded frames, the final layer reads motion
// only), so the blocks can skip them: every per-token product and norm then runs over the valid tokens
// alone, and only the attention works in the padded layout (its q/k/v scattered there, its output gathered
// back). The kernel switch `packed_tokens` turns it on for the training loss.
//
// Packed in the step, the masks are read on the host (a wait for the device) and every batch has its own
// shapes. Packed ahead of the step (add_packed_tokens, the family's prepare_batch hook), the indices travel
// with the batch as inputs: the step reads nothing on the host and can be captured as a CUDA graph, and the
// rows kept are the valid ones plus enough padded ones to round each count up to a sixteenth of the padded
// rows, so that batches of nearby lengths share one graph. A kept padded row changes nothing the loss sees:
// the attention bias closes it as a key, the loss masks its frame.
#pragma once

#include "kernels/kernel_tensors.h"

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

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

// Adds a packing of `batch`'s x_mask_temporal and ctxt_mask_temporal (bucketed as above) as entries named
// "packed_tokens.<part>", on the masks' device (page-locked when the masks are).
void add_packed_tokens(std::map<std::string, torch::Tensor>& batch);
// The packing add_packed_tokens put in `batch` (read without a host wait; each sample's longest row count is
// taken as the padded length), or null when it holds none.
std::shared_ptr<const PackedTokens> packed_tokens_of(const std::map<std::string, torch::Tensor>& batch);

// Whether the training loss packs: the kernel switch `packed_tokens` (core/kernel_switches.cpp).
bool packed_tokens_enabled();
void set_packed_tokens(bool on);

}  // namespace zest::hymotion
