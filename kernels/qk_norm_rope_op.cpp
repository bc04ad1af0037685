// uses_qk_norm_rope_kernels (see qk_norm_rope_op.h); the kernels' autograd function is in qk_norm_rope_cuda.cpp.
#include "kernels/qk_norm_rope_op.h"

#include "core/check.h"
#include "core/kernel_switches.h"
#include "kernels/fused_paths.h"
#include "kernels/kernel_tensors.h"

#include <cstdint>
#include <string>

namespace zest {

#ifdef ZEST_WITH_CUDA
bool qk_norm_rope_covers(int64_t head_dim, int element_bytes);  // qk_norm_rope.h (nvcc-compiled)
int64_t qk_norm_rope_alignment(int element_bytes);
AttentionInputs qk_norm_rope_cuda(const std::vector<QkvProjection>& streams, int64_t num_heads,
                                  const torch::Tensor& cos, const torch::Tensor& sin, double eps);
#endif

namespace {
KernelSwitch& the_switch() {  // [engine.kernels] qk_norm_rope (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("qk_norm_rope");
  return on;
}
}  // namespace

bool qk_norm_rope_enabled() { return the_switch().enabled(); }
void set_qk_norm_rope(bool enabled) { the_switch().set(enabled); }

#ifdef ZEST_WITH_CUDA
namespace {

// Why the kernels cannot take these inputs, or nothing when they can.
std::string refusal(const std::vector<QkvProjection>& streams, int64_t num_heads, const torch::Tensor& cos,
                    const torch::Tensor& sin) {
  if (!qk_norm_rope_enabled()) return "switched off ([engine.kernels] qk_norm_rope = false, or ZEST_QK_NORM_ROPE=0)";
  if (streams.empty() || streams.size() > 2 || num_heads <= 0) return "one or two streams of whole heads";
  const auto& first = streams.front().proj;
  if (first.dim() != 3 || first.size(-1) % (3 * num_heads) != 0) return "the projection is not [B, S, 3·H·d]";
  const auto dtype = first.scalar_type();
  const int64_t head_dim = first.size(-1) / (3 * num_heads);
  const int bytes = static_cast<int>(first.element_size());
  if (!is_kernel_dtype(dtype)) return "dtype not float32, bfloat16 or float16";
  if (!qk_norm_rope_covers(head_dim, bytes)) {
    return "head dim " + std::to_string(head_dim) + " not covered (8 to 256, whole 16-byte accesses)";
  }
  const int64_t align = qk_norm_rope_alignment(bytes);
  const auto aligned = [&](const torch::Tensor& t) {
    return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % static_cast<std::uintptr_t>(16) == 0;
  };
  int64_t seq = 0;
  for (const auto& s : streams) {
    const auto& p = s.proj;
    const bool proj_ok = p.defined() && p.device() == first.device() && p.scalar_type() == dtype && p.dim() == 3 &&
                         p.size(0) == first.size(0) && p.size(2) == first.size(2) && p.stride(2) == 1 &&
                         p.stride(1) % align == 0 && p.stride(0) % align == 0 && p.numel() > 0 && aligned(p);
    const auto weight_ok = [&](const torch::Tensor& w) {
      return w.defined() && w.device() == first.device() && w.scalar_type() == dtype && w.dim() == 1 &&
             w.size(0) == head_dim && w.is_contiguous() && aligned(w);
    };
    if (!proj_ok) return "a projection is not 16-byte aligned with a contiguous last dim";
    if (!weight_ok(s.q_weight) || !weight_ok(s.k_weight)) return "a norm weight is not [d] in the projection's dtype";
    seq += p.size(1);
  }
  const bool tables_ok = cos.defined() && sin.defined() && cos.scalar_type() == torch::kFloat32 &&
                         sin.scalar_type() == torch::kFloat32 && cos.device() == first.device() &&
                         sin.device() == first.device() && cos.dim() == 2 && cos.sizes() == sin.sizes() &&
                         cos.size(1) == head_dim && cos.size(0) <= seq && cos.is_contiguous() && sin.is_contiguous();
  if (!tables_ok) return "the RoPE tables are not float32 [rotated ≤ S, d] on the device";
  return {};
}

}  // namespace
#endif

bool uses_qk_norm_rope_kernels(const std::vector<QkvProjection>& streams, int64_t num_heads, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
#ifdef ZEST_WITH_CUDA
  if (streams.empty() || !streams.front().proj.defined() || !streams.front().proj.is_cuda()) return false;
  const std::string why_not = refusal(streams, num_heads, cos, sin);
  note_fused_path("qk_norm_rope", why_not.empty(), why_not);
  return why_not.empty();
#else
  (void)streams, (void)num_heads, (void)cos, (void)sin;
  return false;
#endif
}

AttentionInputs qk_norm_rope(const std::vector<QkvProjection>& streams, int64_t num_heads, const torch::Tensor& cos,
                             const torch::Tensor& sin, double eps) {
#ifdef ZEST_WITH_CUDA
  const std::string why_not = refusal(streams, num_heads, cos, sin);
  ZEST_CHECK(why_not.empty(), "q/k norm + RoPE kernels: ", why_not);
  return qk_norm_rope_cuda(streams, num_heads, cos, sin, eps);
#else
  (void)streams, (void)num_heads, (void)cos, (void)sin, (void)eps;
  ZEST_FAIL("q/k norm + RoPE kernels: this zest was built without CUDA");
#endif
}

}  // namespace zest
