// pack_tokens and add_packed_tokens (see packed_tokens.h): the index tensors built on the host from the masks
// (a few thousand entries), then copied to the masks' device in one transfer.
#include "models/hymotion/packed_tokens.h"

#include "core/check.h"
#include "core/kernel_switches.h"

#include <torch/cuda.h>

#include <array>
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

// The index tensors in the order of kParts; every one int64.
constexpr std::array<const char*, 12> kParts = {
    "motion_rows", "text_rows",     "joint_rows", "streams_in_joint", "joint_from_streams", "motion_of_joint",
    "motion_starts", "motion_sample", "text_starts", "text_sample", "joint_starts", "joint_sample"};
constexpr const char* kEntryPrefix = "packed_tokens.";

// What a packing's kernels take on the host besides its index tensors.
struct PackingShape {
  int64_t batch = 0, motion_len = 0, text_len = 0;
  int64_t longest_motion = 0, longest_text = 0, longest_joint = 0;  // the most rows of one sample
};

// A packing's index tensors on the host (kParts' order), from bool masks on the host.
struct HostPacking {
  PackingShape shape;
  std::vector<torch::Tensor> parts;
};

HostPacking pack_on_host(const torch::Tensor& xv, const torch::Tensor& cv) {
  HostPacking h;
  PackingShape& shape = h.shape;
  shape.batch = xv.size(0), shape.motion_len = xv.size(1), shape.text_len = cv.size(1);
  const int64_t joint_len = shape.motion_len + shape.text_len;
  const auto motion_rows = nonzero_rows(xv), text_rows = nonzero_rows(cv);
  const auto joint_rows = nonzero_rows(torch::cat({xv, cv}, 1));
  // Where the kept frames and tokens sit in the joined layout.
  const auto motion_in_joint =
      motion_rows.div(shape.motion_len, "floor") * joint_len + motion_rows.remainder(shape.motion_len);
  const auto text_in_joint =
      text_rows.div(shape.text_len, "floor") * joint_len + shape.motion_len + text_rows.remainder(shape.text_len);
  const auto streams_in_joint = torch::cat({motion_in_joint, text_in_joint});  // the rows of cat(motion, text)
  const auto from_streams = inverse(streams_in_joint, shape.batch * joint_len);
  const auto joint_of = inverse(joint_rows, shape.batch * joint_len);
  const auto motion_counts = xv.sum(1), text_counts = cv.sum(1);
  const SampleRows motion = sample_rows(motion_counts), text = sample_rows(text_counts),
                   joint = sample_rows(motion_counts + text_counts);
  shape.longest_motion = motion.longest, shape.longest_text = text.longest, shape.longest_joint = joint.longest;
  h.parts = {motion_rows,   text_rows,     joint_rows,  streams_in_joint, from_streams.index_select(0, joint_rows),
             joint_of.index_select(0, motion_in_joint), motion.starts, motion.sample, text.starts, text.sample,
             joint.starts,  joint.sample};
  return h;
}

// The parts on `device`: views of one host buffer (page-locked for a CUDA device, or when `pinned`), copied in
// one transfer that does not wait for the device (from pageable memory each copy would).
std::vector<torch::Tensor> placed_parts(const std::vector<torch::Tensor>& parts, const torch::Device& device,
                                        bool pinned) {
  auto host = torch::cat(parts);
  if (device.is_cuda() || pinned) host = host.pin_memory();
  const auto all = device.is_cpu() ? host : host.to(device, /*non_blocking=*/true);
  std::vector<torch::Tensor> placed;
  int64_t at = 0;
  for (const auto& part : parts) {
    placed.push_back(all.narrow(0, at, part.size(0)));
    at += part.size(0);
  }
  return placed;
}

// The packing of placed parts (kParts' order), the starts cast to int32 for the kernels.
PackedTokens assembled(const PackingShape& shape, const std::vector<torch::Tensor>& parts) {
  PackedTokens p;
  p.batch = shape.batch, p.motion_len = shape.motion_len, p.text_len = shape.text_len;
  p.motion_rows = parts[0];
  p.text_rows = parts[1];
  p.joint_rows = parts[2];
  p.streams_in_joint = parts[3];
  p.joint_from_streams = parts[4];
  p.motion_of_joint = parts[5];
  const auto samples = [&](size_t starts_at, int64_t longest) {
    return SampleRows{parts[starts_at].to(torch::kInt), parts[starts_at + 1], longest};
  };
  p.motion = samples(6, shape.longest_motion);
  p.text = samples(8, shape.longest_text);
  p.joint = samples(10, shape.longest_joint);
  return p;
}

// The masks as bool on the host.
torch::Tensor host_valid(const torch::Tensor& valid) { return valid.to(torch::kCPU).ne(0); }

void check_masks(const torch::Tensor& x_valid, const torch::Tensor& ctxt_valid) {
  ZEST_CHECK(x_valid.dim() == 2 && ctxt_valid.dim() == 2 && x_valid.size(0) == ctxt_valid.size(0),
             "packed tokens: x_mask_temporal ", x_valid.sizes(), " and ctxt_mask_temporal ", ctxt_valid.sizes(),
             " must be [B, L] and [B, T]");
}

// `valid` [B, L] (bool, host) with padded positions marked too, the first ones in row order, until the count
// is a multiple of a sixteenth of B·L (or all of them).
torch::Tensor kept_to_bucket(const torch::Tensor& valid) {
  constexpr int64_t kBuckets = 16;
  const int64_t total = valid.numel(), count = valid.sum().item<int64_t>();
  const int64_t step = std::max<int64_t>(1, (total + kBuckets - 1) / kBuckets);
  const int64_t kept = std::min(total, (count + step - 1) / step * step);
  if (kept == count) return valid;
  auto flat = valid.flatten().clone();
  const auto padded = flat.logical_not().nonzero().squeeze(1).narrow(0, 0, kept - count);
  return flat.index_fill_(0, padded, true).view(valid.sizes());
}

const torch::Tensor& entry(const std::map<std::string, torch::Tensor>& batch, const std::string& name) {
  const auto it = batch.find(name);
  ZEST_CHECK(it != batch.end(), "packed tokens: the batch has no '", name, "'");
  return it->second;
}

KernelSwitch& packed_tokens_switch() {
  static KernelSwitch& on = kernel_switch("packed_tokens");  // once; reading it is an atomic load
  return on;
}
}  // namespace

bool packed_tokens_enabled() { return packed_tokens_switch().enabled(); }
void set_packed_tokens(bool on) { packed_tokens_switch().set(on); }

PackedTokens pack_tokens(const torch::Tensor& x_valid, const torch::Tensor& ctxt_valid) {
  check_masks(x_valid, ctxt_valid);
  const HostPacking h = pack_on_host(host_valid(x_valid), host_valid(ctxt_valid));
  return assembled(h.shape, placed_parts(h.parts, x_valid.device(), /*pinned=*/false));
}

void add_packed_tokens(std::map<std::string, torch::Tensor>& batch) {
  const auto& x_valid = entry(batch, "x_mask_temporal");
  const auto& ctxt_valid = entry(batch, "ctxt_mask_temporal");
  check_masks(x_valid, ctxt_valid);
  const HostPacking h = pack_on_host(kept_to_bucket(host_valid(x_valid)), kept_to_bucket(host_valid(ctxt_valid)));
  // A loader's page-locked batch: its copy to the device is asynchronous, so the indices' should be too.
  const bool pinned = x_valid.is_cpu() && torch::cuda::is_available() && x_valid.is_pinned();
  const auto parts = placed_parts(h.parts, x_valid.device(), pinned);
  for (size_t i = 0; i < kParts.size(); ++i) batch[std::string(kEntryPrefix) + kParts[i]] = parts[i];
}

std::shared_ptr<const PackedTokens> packed_tokens_of(const std::map<std::string, torch::Tensor>& batch) {
  if (batch.count(std::string(kEntryPrefix) + kParts[0]) == 0) return nullptr;
  const auto& x_valid = entry(batch, "x_mask_temporal");
  const auto& ctxt_valid = entry(batch, "ctxt_mask_temporal");
  check_masks(x_valid, ctxt_valid);
  PackingShape shape;
  shape.batch = x_valid.size(0), shape.motion_len = x_valid.size(1), shape.text_len = ctxt_valid.size(1);
  shape.longest_motion = shape.motion_len;
  shape.longest_text = shape.text_len;
  shape.longest_joint = shape.motion_len + shape.text_len;
  std::vector<torch::Tensor> parts;
  for (const char* part : kParts) parts.push_back(entry(batch, std::string(kEntryPrefix) + part));
  return std::make_shared<const PackedTokens>(assembled(shape, parts));
}

}  // namespace zest::hymotion
