// pack_tokens (see packed_tokens.h): the index tensors built on the host from the masks (a few thousand
// entries), then copied to the masks' device in one transfer.
#include "models/hymotion/packed_tokens.h"

#include "core/check.h"
#include "core/kernel_switches.h"

#include <vector>

namespace zest::hymotion {
namespace {

torch::Tensor nonzero_rows(const torch::Tensor& valid) { return valid.flatten().nonzero().squeeze(1); }

// [B + 1] starts of the per-sample counts (int64 on the host; int32 once on the device), and each row's sample.
SampleRows sample_rows(const torch::Tensor& counts) {
  SampleRows s;
  s.starts = torch::cat({torch::zeros({1}, counts.options()), counts.cumsum(0)});
  s.sample = torch::repeat_interleave(torch::arange(counts.size(0), counts.options()), counts);
  s.longest = counts.numel() ? counts.max().item<int64_t>() : 0;
  return s;
}

// i at rows[i] of a table of `size` entries, −1 elsewhere: an inverse index.
torch::Tensor inverse(const torch::Tensor& rows, int64_t size) {
  auto table = torch::full({size}, -1, rows.options());
  return table.index_put_({rows}, torch::arange(rows.size(0), rows.options()));
}

KernelSwitch& packed_tokens_switch() {
  static KernelSwitch& on = kernel_switch("packed_tokens");  // once; reading it is an atomic load
  return on;
}
}  // namespace

bool packed_tokens_enabled() { return packed_tokens_switch().enabled(); }
void set_packed_tokens(bool on) { packed_tokens_switch().set(on); }

PackedTokens pack_tokens(const torch::Tensor& x_valid, const torch::Tensor& ctxt_valid) {
  ZEST_CHECK(x_valid.dim() == 2 && ctxt_valid.dim() == 2 && x_valid.size(0) == ctxt_valid.size(0),
             "packed tokens: x_mask_temporal ", x_valid.sizes(), " and ctxt_mask_temporal ", ctxt_valid.sizes(),
             " must be [B, L] and [B, T]");
  const auto device = x_valid.device();
  const auto xv = x_valid.to(torch::kCPU).ne(0), cv = ctxt_valid.to(torch::kCPU).ne(0);
  PackedTokens p;
  p.batch = xv.size(0), p.motion_len = xv.size(1), p.text_len = cv.size(1);
  const int64_t joint_len = p.joint_len();

  const auto motion_rows = nonzero_rows(xv), text_rows = nonzero_rows(cv);
  const auto joint_rows = nonzero_rows(torch::cat({xv, cv}, 1));
  // Where the valid frames and tokens sit in the joined layout.
  const auto motion_in_joint = motion_rows.div(p.motion_len, "floor") * joint_len + motion_rows.remainder(p.motion_len);
  const auto text_in_joint =
      text_rows.div(p.text_len, "floor") * joint_len + p.motion_len + text_rows.remainder(p.text_len);
  const auto streams_in_joint = torch::cat({motion_in_joint, text_in_joint});  // the rows of cat(motion, text)
  const auto from_streams = inverse(streams_in_joint, p.batch * joint_len);
  const auto joint_of = inverse(joint_rows, p.batch * joint_len);

  const auto motion_counts = xv.sum(1), text_counts = cv.sum(1);
  SampleRows motion = sample_rows(motion_counts), text = sample_rows(text_counts),
             joint = sample_rows(motion_counts + text_counts);
  // Every index in one host buffer (page-locked for a CUDA device) and one copy: the masks' read already
  // waited for the device, and each copy from pageable memory would wait for it again.
  std::vector<torch::Tensor> parts{motion_rows,
                                   text_rows,
                                   joint_rows,
                                   streams_in_joint,
                                   from_streams.index_select(0, joint_rows),
                                   joint_of.index_select(0, motion_in_joint),
                                   motion.starts,
                                   motion.sample,
                                   text.starts,
                                   text.sample,
                                   joint.starts,
                                   joint.sample};
  auto host = torch::cat(parts);
  if (device.is_cuda()) host = host.pin_memory();
  const auto all = host.to(device, /*non_blocking=*/true);
  std::vector<torch::Tensor> on_device;
  int64_t at = 0;
  for (const auto& part : parts) {
    on_device.push_back(all.narrow(0, at, part.size(0)));
    at += part.size(0);
  }
  p.motion_rows = on_device[0];
  p.text_rows = on_device[1];
  p.joint_rows = on_device[2];
  p.streams_in_joint = on_device[3];
  p.joint_from_streams = on_device[4];
  p.motion_of_joint = on_device[5];
  const auto placed = [&](SampleRows s, size_t starts_at) {
    s.starts = on_device[starts_at].to(torch::kInt);
    s.sample = on_device[starts_at + 1];
    return s;
  };
  p.motion = placed(motion, 6);
  p.text = placed(text, 8);
  p.joint = placed(joint, 10);
  return p;
}

}  // namespace zest::hymotion
