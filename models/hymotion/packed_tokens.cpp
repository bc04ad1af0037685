// pack_tokens (see packed_tokens.h): the index tensors built on the host from the masks (a few thousand
// entries), then copied to the masks' device.
#include "models/hymotion/packed_tokens.h"

#include "core/check.h"
#include "core/kernel_switches.h"

namespace zest::hymotion {
namespace {

torch::Tensor nonzero_rows(const torch::Tensor& valid) { return valid.flatten().nonzero().squeeze(1); }

// int32 [B + 1] starts of the per-sample counts, and each row's sample.
SampleRows sample_rows(const torch::Tensor& counts) {
  SampleRows s;
  s.starts = torch::cat({torch::zeros({1}, counts.options()), counts.cumsum(0)}).to(torch::kInt);
  s.sample = torch::repeat_interleave(torch::arange(counts.size(0), counts.options()), counts);
  s.longest = counts.numel() ? counts.max().item<int64_t>() : 0;
  return s;
}

// `values` at `rows` of a table of `size` entries, −1 elsewhere: an inverse index.
torch::Tensor inverse(const torch::Tensor& rows, int64_t size) {
  auto table = torch::full({size}, -1, rows.options());
  return table.index_put_({rows}, torch::arange(rows.size(0), rows.options()));
}

}  // namespace

bool packed_tokens_enabled() { return kernel_switch("packed_tokens").enabled(); }
void set_packed_tokens(bool on) { kernel_switch("packed_tokens").set(on); }

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
  const int64_t motion_count = motion_rows.size(0);
  auto from_streams = torch::full({p.batch * joint_len}, -1, motion_rows.options());
  from_streams.index_put_({motion_in_joint}, torch::arange(motion_count, motion_rows.options()));
  from_streams.index_put_({text_in_joint}, motion_count + torch::arange(text_rows.size(0), text_rows.options()));
  const auto joint_of = inverse(joint_rows, p.batch * joint_len);

  const auto long_on = [&](const torch::Tensor& t) { return t.to(device); };
  p.motion_rows = long_on(motion_rows);
  p.text_rows = long_on(text_rows);
  p.joint_rows = long_on(joint_rows);
  p.motion_in_joint = long_on(motion_in_joint);
  p.text_in_joint = long_on(text_in_joint);
  p.joint_from_streams = long_on(from_streams.index_select(0, joint_rows));
  p.motion_of_joint = long_on(joint_of.index_select(0, motion_in_joint));
  const auto on_device = [&](SampleRows s) {
    s.starts = s.starts.to(device);
    s.sample = s.sample.to(device);
    return s;
  };
  const auto motion_counts = xv.sum(1), text_counts = cv.sum(1);
  p.motion = on_device(sample_rows(motion_counts));
  p.text = on_device(sample_rows(text_counts));
  p.joint = on_device(sample_rows(motion_counts + text_counts));
  return p;
}

}  // namespace zest::hymotion
