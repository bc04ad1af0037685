// The optimizer on the CPU. AdamW and SGD keep their ATen-op forms, PyTorch's update rules op by op as
// torch.optim runs them (zest's CPU results have always been these, and the equivalence and EMA tests
// hold them within 1e-6 of LibTorch's optimizers):
// AdamW: p ← p·(1 − lr·wd); m ← lerp(m, g, 1−β1); v ← β2·v + (1−β2)·g²; p ← p − lr/(1−β1^t) · m / (√v/√(1−β2^t) + ε).
// SGD:   g ← g + wd·p; b ← μ·b + g (b = g on the first step); g ← g + μ·b (Nesterov) or b; p ← p − lr·g.
// Every other rule runs its per-element update (optim/optimizers.h) through the host pass
// (optim/host_update.h) over every decay run, split over the intra-op threads (each element is
// independent, so the split does not change the result); the offloaded optimizer runs that same pass.
#include "core/check.h"
#include "optim/host_update.h"
#include "optim/optimizer.h"
#include "engine/step_scalars.h"

#include <ATen/Parallel.h>

namespace zest {
namespace {

// The step's numbers: the scalars tensor is on the CPU here, so it is read directly.
const StepScalars& scalars_of(const torch::Tensor& scalars) {
  return *reinterpret_cast<const StepScalars*>(scalars.data_ptr<double>());
}

// Gradient of a segment as a fresh fp32 tensor times the multiplier (never modifies the engine's).
torch::Tensor scaled_fp32_grad(const torch::Tensor& grad, double multiplier) {
  auto g = grad.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  if (multiplier != 1.0) g.mul_(multiplier);
  return g;
}

class CpuAdamW final : public Optimizer {
 public:
  CpuAdamW(const OptimConfig& config, std::vector<OptimSegment> segments, int64_t numel, torch::Tensor scalars)
      : Optimizer(config, std::move(segments), std::move(scalars), numel, torch::TensorOptions()) {}

  void step_segments(size_t first, size_t end) override {
    torch::NoGradGuard no_grad;
    const StepScalars& s = scalars_of(scalars_);
    if (s.skip != 0.0) return;
    const double step_size = s.lr / s.bias_correction1;
    const double decay = 1.0 - s.lr * config_.weight_decay;
    for (size_t i = first; i < end; ++i) {
      const OptimSegment& seg = segments_[i];
      const int64_t n = seg.master.numel();
      auto m = states_[0].narrow(0, seg.in_flat.begin, n);  // exp_avg
      auto v = states_[1].narrow(0, seg.in_flat.begin, n);  // exp_avg_sq
      const auto g = scaled_fp32_grad(seg.grad, s.grad_multiplier);
      if (decay != 1.0) {
        for (const ElementSpan& d : seg.decay_spans) seg.master.narrow(0, d.begin, d.numel).mul_(decay);
      }
      m.lerp_(g, 1.0 - config_.beta1);
      v.mul_(config_.beta2).addcmul_(g, g, 1.0 - config_.beta2);
      const auto denom = (v.sqrt() / s.bias_correction2_sqrt).add_(config_.eps);
      seg.master.addcdiv_(m, denom, -step_size);
      if (seg.param.defined()) seg.param.copy_(seg.master);
    }
  }
};

class CpuSgd final : public Optimizer {
 public:
  CpuSgd(const OptimConfig& config, std::vector<OptimSegment> segments, int64_t numel, torch::Tensor scalars)
      : Optimizer(config, std::move(segments), std::move(scalars), numel, torch::TensorOptions()) {}

  void step_segments(size_t first, size_t end) override {
    torch::NoGradGuard no_grad;
    const StepScalars& s = scalars_of(scalars_);
    if (s.skip != 0.0) return;
    const bool is_first_update = s.applied_steps == 1.0;
    for (size_t i = first; i < end; ++i) {
      const OptimSegment& seg = segments_[i];
      auto g = scaled_fp32_grad(seg.grad, s.grad_multiplier);
      for (const ElementSpan& d : seg.decay_spans) {
        g.narrow(0, d.begin, d.numel).add_(seg.master.narrow(0, d.begin, d.numel), config_.weight_decay);
      }
      if (config_.momentum != 0.0) {
        auto buf = states_[0].narrow(0, seg.in_flat.begin, seg.master.numel());  // momentum
        is_first_update ? buf.copy_(g) : buf.mul_(config_.momentum).add_(g);
        if (config_.nesterov) {
          g.add_(buf, config_.momentum);
        } else {
          g = buf;
        }
      }
      seg.master.add_(g, -s.lr);
      if (seg.param.defined()) seg.param.copy_(seg.master);
    }
  }
};

class CpuOptimizer final : public Optimizer {
 public:
  CpuOptimizer(const OptimConfig& config, std::vector<OptimSegment> segments, int64_t numel, torch::Tensor scalars)
      : Optimizer(config, std::move(segments), std::move(scalars), numel, torch::TensorOptions()) {
    for (const auto& seg : segments_) {
      ZEST_CHECK(seg.master.is_contiguous() && seg.grad.is_contiguous() &&
                     (!seg.param.defined() || seg.param.is_contiguous()),
                 "CPU optimizer: segments must be contiguous");
      // Other dtypes are refused here, not mid-step.
      ZEST_CHECK(is_host_update_dtype(seg.grad.scalar_type()) &&
                     (!seg.param.defined() || is_host_update_dtype(seg.param.scalar_type())),
                 "CPU optimizer: gradient ", seg.grad.scalar_type(), " and parameter ",
                 seg.param.defined() ? c10::toString(seg.param.scalar_type()) : "(none)",
                 " dtypes must each be fp32, bf16 or fp16");
    }
  }

  void step_segments(size_t first, size_t end) override {
    const StepScalars& s = scalars_of(scalars_);
    if (s.skip != 0.0) return;
    const StepValues step = step_values(s);
    constexpr int64_t kGrain = 1 << 15;
    for (size_t i = first; i < end; ++i) {
      const OptimSegment& seg = segments_[i];
      for (const auto& [range, decay] : decay_runs(seg)) {
        at::parallel_for(range.begin, range.end(), kGrain, [&](int64_t begin, int64_t end) {
          host_update(config_.name, hyper_, step, decay, range_of(seg, begin, end));
        });
      }
    }
  }

 private:
  HostRange range_of(const OptimSegment& seg, int64_t begin, int64_t end) const {
    const int64_t at = seg.in_flat.begin + begin;  // in the flat state buffers
    return {seg.master.data_ptr<float>() + begin,
            {state_at(0, at), state_at(1, at)},
            static_cast<const char*>(seg.grad.data_ptr()) + begin * seg.grad.element_size(),
            seg.grad.scalar_type(),
            seg.param.defined() ? static_cast<char*>(seg.param.data_ptr()) + begin * seg.param.element_size() : nullptr,
            seg.param.defined() ? seg.param.scalar_type() : c10::ScalarType::Undefined,
            end - begin};
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_cpu_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                              int64_t numel, torch::Tensor step_scalars) {
  switch (config.name) {
    case OptimizerKind::adamw: return std::make_unique<CpuAdamW>(config, std::move(segments), numel, std::move(step_scalars));
    case OptimizerKind::sgd: return std::make_unique<CpuSgd>(config, std::move(segments), numel, std::move(step_scalars));
    default: return std::make_unique<CpuOptimizer>(config, std::move(segments), numel, std::move(step_scalars));
  }
}

}  // namespace zest
