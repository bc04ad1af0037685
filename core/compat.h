// LibTorch version differences (Debian's 1.13 CPU build vs the 2.x CUDA wheel), kept in one place.
// Everything else in zest includes this instead of testing TORCH_VERSION_* itself.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <optional>

#define ZEST_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace zest::compat {

// c10::optional does not convert from std::optional in 1.13; go through this.
template <typename T>
c10::optional<T> opt(const std::optional<T>& value) {
  return value ? c10::optional<T>(*value) : c10::nullopt;
}

// Writable raw pointer to a tensor's data (mutable_data_ptr exists from 2.1 on).
inline void* mutable_data(const torch::Tensor& t) {
#if ZEST_TORCH_AT_LEAST(2, 1)
  return t.mutable_data_ptr();
#else
  return t.data_ptr();
#endif
}
inline const void* const_data(const torch::Tensor& t) {
#if ZEST_TORCH_AT_LEAST(2, 1)
  return t.const_data_ptr();
#else
  return t.data_ptr();
#endif
}

// A profiler event's start, duration and end in nanoseconds (1.13's KinetoEvent counts microseconds and
// has no end). Templates, so that only the file that profiles includes the profiler's header.
template <typename Event>
uint64_t event_start_ns(const Event& e) {
#if ZEST_TORCH_AT_LEAST(2, 1)
  return e.startNs();
#else
  return e.startUs() * 1000;
#endif
}
template <typename Event>
uint64_t event_duration_ns(const Event& e) {
#if ZEST_TORCH_AT_LEAST(2, 1)
  return e.durationNs();
#else
  return e.durationUs() * 1000;
#endif
}
template <typename Event>
uint64_t event_end_ns(const Event& e) {
  return event_start_ns(e) + event_duration_ns(e);
}

// softmax(q·kᵀ·scale + bias)·v over [B, H, S, d] tensors. bias: additive, broadcastable to
// [B, H, Sq, Sk] (may be undefined). 2.x dispatches to fused kernels (flash/efficient on GPU);
// 1.13 has no public SDPA, so the math path runs there.
inline torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v,
                                                  const torch::Tensor& bias = {}) {
#if ZEST_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, bias.defined() ? c10::optional<at::Tensor>(bias)
                                                                  : c10::nullopt);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1));
  if (bias.defined()) scores = scores + bias;
  // The fused kernels accumulate the softmax in fp32 whatever the input dtype; so does this path.
  return torch::matmul(torch::softmax(scores, -1, torch::kFloat32).to(v.scalar_type()), v);
#endif
}

// L2 norm of each tensor, computed and returned in fp32 (one fused kernel where LibTorch has the dtype
// argument, 2.4 on; before, per tensor).
inline std::vector<torch::Tensor> foreach_norm_fp32(const std::vector<torch::Tensor>& tensors) {
#if ZEST_TORCH_AT_LEAST(2, 4)
  return at::_foreach_norm(tensors, 2, at::kFloat);
#else
  std::vector<torch::Tensor> norms;
  for (const auto& t : tensors) norms.push_back(t.to(torch::kFloat32).norm());
  return norms;
#endif
}

// Autocast state for activation checkpointing's recompute (names changed in 2.4).
struct AutocastState {
  bool cpu_enabled = false;
  bool gpu_enabled = false;
};
inline AutocastState autocast_state() {
#if ZEST_TORCH_AT_LEAST(2, 4)
  return {at::autocast::is_autocast_enabled(at::kCPU), at::autocast::is_autocast_enabled(at::kCUDA)};
#else
  return {at::autocast::is_cpu_enabled(), at::autocast::is_enabled()};
#endif
}
inline void set_autocast_state(const AutocastState& s) {
#if ZEST_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCPU, s.cpu_enabled);
  at::autocast::set_autocast_enabled(at::kCUDA, s.gpu_enabled);
#else
  at::autocast::set_cpu_enabled(s.cpu_enabled);
  at::autocast::set_enabled(s.gpu_enabled);
#endif
}

}  // namespace zest::compat
