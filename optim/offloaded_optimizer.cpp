// OffloadedOptimizer (see offloaded_optimizer.h): pinned host copies, the side-stream copies, and the
// host update — one pass over each unit's elements with PyTorch's update rules (those of
// optim/cpu_optimizers.cpp), in chunks spread over as many threads as the rank's intra-op threads.
#include "optim/offloaded_optimizer.h"

#include "core/check.h"
#include "optim/pinned_memory.h"
#include "optim/step_scalars.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

namespace zest {
namespace {

// m ← m + (1−β1)(g − m) (ATen's lerp for weights < 0.5); v ← β2·v + (1−β2)·g²;
// p ← p·(1 − lr·wd) − step_size · m / (√v / √(1−β2^t) + ε).
template <typename Grad, typename Param>
void adamw_range(const HostUpdate& u, bool decay, float* master, float* m, float* v, const Grad* grad,
                 Param* param, int64_t n) {
  const float decay_factor = decay ? 1.0f - u.lr * u.weight_decay : 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = static_cast<float>(grad[i]) * u.multiplier;
    const float mi = m[i] + (1.0f - u.beta1) * (g - m[i]);
    const float vi = u.beta2 * v[i] + (1.0f - u.beta2) * g * g;
    const float p = master[i] * decay_factor - u.step_size * mi / (std::sqrt(vi) / u.bias_correction2_sqrt + u.eps);
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    param[i] = static_cast<Param>(p);
  }
}

// g ← g + wd·p; b ← μ·b + g (b = g on the first step); g ← g + μ·b (Nesterov) or b; p ← p − lr·g.
template <typename Grad, typename Param>
void sgd_range(const HostUpdate& u, bool decay, float* master, float* buf, const Grad* grad, Param* param,
               int64_t n) {
  const float wd = decay ? u.weight_decay : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float g = static_cast<float>(grad[i]) * u.multiplier + wd * master[i];
    if (buf != nullptr) {
      const float b = u.first_sgd_step ? g : u.momentum * buf[i] + g;
      buf[i] = b;
      g = u.nesterov ? g + u.momentum * b : b;
    }
    master[i] -= u.lr * g;
    param[i] = static_cast<Param>(master[i]);
  }
}

template <typename Fn>
void with_element_types(torch::Dtype grad, torch::Dtype param, Fn&& fn) {
  auto with_param = [&](auto grad_tag) {
    using G = decltype(grad_tag);
    switch (param) {
      case torch::kFloat32: return fn(G{}, float{});
      case torch::kBFloat16: return fn(G{}, c10::BFloat16{});
      case torch::kFloat16: return fn(G{}, c10::Half{});
      default: ZEST_FAIL("offloaded optimizer: parameter dtype ", param, " is not fp32, bf16 or fp16");
    }
  };
  switch (grad) {
    case torch::kFloat32: return with_param(float{});
    case torch::kBFloat16: return with_param(c10::BFloat16{});
    case torch::kFloat16: return with_param(c10::Half{});
    default: ZEST_FAIL("offloaded optimizer: gradient dtype ", grad, " is not fp32, bf16 or fp16");
  }
}

}  // namespace

OffloadedOptimizer::OffloadedOptimizer(const OptimConfig& config, std::vector<OptimSegment> device_segments,
                                       int64_t numel, torch::Tensor step_scalars)
    : Optimizer(config, std::move(device_segments), std::move(step_scalars)),
      is_adamw_(config.name == OptimizerKind::adamw),
      copies_(scalars_.device()) {
  const torch::Device device = scalars_.device();  // the host buffers cross PCIe: page-locked for a GPU
  const torch::Dtype grad_dtype = segments_.empty() ? torch::kFloat32 : segments_.front().grad.scalar_type();
  const torch::Dtype param_dtype = segments_.empty() ? torch::kFloat32 : segments_.front().param.scalar_type();
  for (const auto& seg : segments_) {
    ZEST_CHECK(seg.master.device().is_cpu(), "offloaded optimizer: the master shard must be in host memory");
    ZEST_CHECK(seg.grad.scalar_type() == grad_dtype && seg.param.scalar_type() == param_dtype,
               "offloaded optimizer: every segment must share the gradient and parameter dtypes");
  }
  grad_host_ = zeroed_host_tensor(numel, grad_dtype, device);
  param_host_ = zeroed_host_tensor(numel, param_dtype, device);
  host_scalars_ = zeroed_host_tensor(kStepScalarCount, torch::kFloat64, device);
  first_ = torch::zeros({numel}, torch::kFloat32);  // never crosses PCIe: pageable
  if (is_adamw_) second_ = torch::zeros({numel}, torch::kFloat32);
  is_grad_copied_.assign(segments_.size(), 0);
  plan_chunks();
}

std::vector<std::pair<std::string, torch::Tensor>> OffloadedOptimizer::state_tensors() const {
  if (is_adamw_) return {{"exp_avg", first_}, {"exp_avg_sq", second_}};
  return {{"momentum", first_}};  // the names the on-device optimizers use: checkpoints move between them
}

void OffloadedOptimizer::copy_grads_to_host(size_t first, size_t last) {
  ZEST_CHECK(first <= last && last < segments_.size(), "copy_grads_to_host: segments ", first, "..", last,
             " outside ", segments_.size());
  copies_.run([&] {
    for (size_t i = first; i <= last; ++i) {
      if (is_grad_copied_[i]) continue;
      const OptimSegment& seg = segments_[i];
      grad_host_.narrow(0, seg.offset, seg.grad.numel()).copy_(seg.grad, /*non_blocking=*/true);
      is_grad_copied_[i] = 1;
    }
  });
}

void OffloadedOptimizer::step() {
  torch::NoGradGuard no_grad;
  if (!segments_.empty()) copy_grads_to_host(0, segments_.size() - 1);
  is_grad_copied_.assign(segments_.size(), 0);
  copies_.join();
  // The one host wait: the decision (and, queued before it, every gradient copy) is on the host after this.
  host_scalars_.copy_(scalars_);
  const StepScalars& s = *reinterpret_cast<const StepScalars*>(host_scalars_.data_ptr<double>());
  if (s.skip != 0.0) return;
  update_and_upload(update_of(s));
  copies_.join();  // the gathers and the next forward read the parameters after their upload
}

HostUpdate OffloadedOptimizer::update_of(const StepScalars& s) const {
  HostUpdate u{};
  u.lr = static_cast<float>(s.lr);
  u.multiplier = static_cast<float>(s.grad_multiplier);
  u.weight_decay = static_cast<float>(config_.weight_decay);
  u.beta1 = static_cast<float>(config_.beta1);
  u.beta2 = static_cast<float>(config_.beta2);
  u.eps = static_cast<float>(config_.eps);
  u.step_size = static_cast<float>(s.lr / s.bias_correction1);
  u.bias_correction2_sqrt = static_cast<float>(s.bias_correction2_sqrt);
  u.momentum = static_cast<float>(config_.momentum);
  u.nesterov = config_.nesterov;
  u.first_sgd_step = s.applied_steps == 1.0;
  return u;
}

// Worker threads take chunks in forward order; the calling thread uploads each unit as soon as its
// last chunk is done, so the host→device copies run while the workers update the next units.
void OffloadedOptimizer::update_and_upload(const HostUpdate& u) {
  std::vector<std::atomic<int64_t>> chunks_left(segments_.size());
  for (size_t i = 0; i < segments_.size(); ++i) chunks_left[i].store(chunks_per_segment_[i]);
  std::atomic<size_t> next_chunk{0};
  auto work = [&] {
    for (size_t c = next_chunk.fetch_add(1); c < chunks_.size(); c = next_chunk.fetch_add(1)) {
      update_chunk(chunks_[c], u);
      std::atomic<int64_t>& left = chunks_left[chunks_[c].segment];
      if (left.fetch_sub(1) == 1) left.notify_one();
    }
  };
  const int workers = std::max(1, at::get_num_threads());
  std::vector<std::jthread> threads;
  threads.reserve(static_cast<size_t>(workers));
  for (int t = 0; t < workers; ++t) threads.emplace_back(work);
  for (size_t i = 0; i < segments_.size(); ++i) {
    for (int64_t left = chunks_left[i].load(); left != 0; left = chunks_left[i].load()) chunks_left[i].wait(left);
    const OptimSegment& seg = segments_[i];
    const torch::Tensor values = param_host_.narrow(0, seg.offset, seg.param.numel());
    copies_.run([&] { seg.param.copy_(values, /*non_blocking=*/true); });
  }
}

void OffloadedOptimizer::update_chunk(const HostChunk& chunk, const HostUpdate& u) {
  const OptimSegment& seg = segments_[chunk.segment];
  const int64_t at = seg.offset + chunk.begin;  // in the flat state buffers
  const int64_t n = chunk.end - chunk.begin;
  float* master = seg.master.data_ptr<float>() + chunk.begin;
  float* first = first_.data_ptr<float>() + at;
  with_element_types(grad_host_.scalar_type(), param_host_.scalar_type(), [&](auto grad_tag, auto param_tag) {
    using G = decltype(grad_tag);
    using P = decltype(param_tag);
    const G* grad = grad_host_.data_ptr<G>() + at;
    P* param = param_host_.data_ptr<P>() + at;
    if (is_adamw_) {
      adamw_range(u, chunk.decay, master, first, second_.data_ptr<float>() + at, grad, param, n);
    } else {
      sgd_range(u, chunk.decay, master, config_.momentum != 0.0 ? first : nullptr, grad, param, n);
    }
  });
}

// Each segment's uniform-decay runs, cut into pieces small enough to spread a unit over every thread.
void OffloadedOptimizer::plan_chunks() {
  constexpr int64_t kChunkNumel = 1 << 16;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const OptimSegment& seg = segments_[i];
    const int64_t n = seg.master.numel();
    std::vector<std::pair<ElementRange, bool>> runs;
    int64_t at = 0;
    for (const auto& r : seg.decay_ranges) {
      if (r.begin > at) runs.push_back({{at, r.begin}, false});
      runs.push_back({r, true});
      at = r.end;
    }
    if (at < n) runs.push_back({{at, n}, false});
    int64_t count = 0;
    for (const auto& [range, decay] : runs) {
      for (int64_t b = range.begin; b < range.end; b += kChunkNumel) {
        chunks_.push_back({i, b, std::min(range.end, b + kChunkNumel), decay});
        ++count;
      }
    }
    chunks_per_segment_.push_back(count);
  }
}

}  // namespace zest
