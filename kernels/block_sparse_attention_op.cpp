// uses_block_sparse_attention and its switch (see block_sparse_attention_op.h); the kernels' autograd function
// is in block_sparse_attention_cuda.cpp.
#include "kernels/block_sparse_attention_op.h"

#include "core/check.h"
#include "core/kernel_switches.h"
#include "kernels/block_sparse_attention.h"
#include "kernels/fused_paths.h"

#include <cstdint>
#include <string>

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor block_sparse_attention_cuda(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& bias);
#endif

namespace {

KernelSwitch& block_sparse_switch() {  // [engine.kernels] block_sparse_attention (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("block_sparse_attention");
  return on;
}

}  // namespace

bool block_sparse_attention_enabled() { return block_sparse_switch().enabled(); }
void set_block_sparse_attention(bool enabled) { block_sparse_switch().set(enabled); }

bool has_block_sparse_attention_layout(const torch::Tensor& t) {
  const auto whole_rows = [&](int64_t dim) { return t.size(dim) == 1 || t.stride(dim) % 8 == 0; };
  return t.stride(3) == 1 && whole_rows(0) && whole_rows(1) && whole_rows(2) &&
         reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

#ifdef ZEST_WITH_CUDA
namespace {

// LibTorch's attention by design, not a fallback: the switch off (LibTorch's cuDNN attention is the faster
// path), CPU tensors, float32 (and float64), no bias (nothing to skip).
bool is_libtorchs_by_design(const torch::Tensor& q, const torch::Tensor& bias) {
  if (!block_sparse_attention_enabled()) return true;
  if (!q.defined() || !q.is_cuda() || !bias.defined()) return true;
  const auto dtype = q.scalar_type();
  return dtype != torch::kBFloat16 && dtype != torch::kFloat16;
}

// Why the kernels cannot take these inputs, or nothing when they can (q is a 16-bit CUDA tensor with a bias).
std::string attention_refusal(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& bias) {
  const auto same_kind = [&](const torch::Tensor& t) {
    return t.defined() && t.scalar_type() == q.scalar_type() && t.device() == q.device();
  };
  if (!same_kind(k) || !same_kind(v) || !same_kind(bias)) return "q, k, v and the bias not of one dtype on one device";
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return "q, k, v not [B, S, H, d]";
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), head_dim = q.size(3), k_len = k.size(1);
  if (!block_sparse_attention_head_dim_covered(head_dim)) {
    return "head dim " + std::to_string(head_dim) + " not covered (multiples of 8 up to " +
           std::to_string(kAttentionMaxHeadDim) + ")";
  }
  if (k.sizes() != v.sizes() || k.size(0) != batch || k.size(2) != heads || k.size(3) != head_dim) {
    return "k and v not [B, Sk, H, d] beside q [B, Sq, H, d]";
  }
  if (q.numel() == 0 || k.numel() == 0) return "an empty batch or sequence";
  if (!has_block_sparse_attention_layout(q) || !has_block_sparse_attention_layout(k) ||
      !has_block_sparse_attention_layout(v)) {
    return "q, k or v without a contiguous head dim, 16-byte multiple strides and 16-byte aligned data";
  }
  const bool bias_shape = bias.dim() == 4 && (bias.size(0) == 1 || bias.size(0) == batch) && bias.size(1) == 1 &&
                          bias.size(2) == q_len && bias.size(3) == k_len;
  if (!bias_shape || bias.stride(3) != 1 || (q_len > 1 && bias.stride(2) != k_len)) {
    return "the bias not [B or 1, 1, Sq, Sk] with contiguous rows";
  }
  return {};
}

}  // namespace
#endif

bool uses_block_sparse_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& bias) {
#ifdef ZEST_WITH_CUDA
  if (is_libtorchs_by_design(q, bias)) return false;
  const std::string why_not = attention_refusal(q, k, v, bias);
  note_fused_path("block_sparse_attention", why_not.empty(), why_not);
  return why_not.empty();
#else
  (void)q, (void)k, (void)v, (void)bias;
  return false;
#endif
}

torch::Tensor block_sparse_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& bias) {
#ifdef ZEST_WITH_CUDA
  ZEST_CHECK(!is_libtorchs_by_design(q, bias),
             "block-sparse attention: needs the switch on, 16-bit CUDA tensors and a bias");
  const std::string why_not = attention_refusal(q, k, v, bias);
  ZEST_CHECK(why_not.empty(), "block-sparse attention: ", why_not);
  return block_sparse_attention_cuda(q, k, v, bias);
#else
  (void)q, (void)k, (void)v, (void)bias;
  ZEST_FAIL("block-sparse attention kernels: this zest was built without CUDA");
#endif
}

}  // namespace zest
