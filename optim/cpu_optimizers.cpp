// AdamW and SGD (momentum) on the CPU, per segment with ATen ops, with exactly PyTorch's update rules:
// AdamW: p ← p·(1 − lr·wd); m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²;
//        p ← p − lr/(1−β1^t) · m / (√v/√(1−β2^t) + ε)   (ε outside the square root).
// SGD:   g ← g + wd·p; b ← μ·b + g (b = g on the first step); g ← g + μ·b (Nesterov) or b; p ← p − lr·g.
// g is the reduced gradient times the step's multiplier (unscale, 1/world, clip coefficient).
#include "core/check.h"
#include "optim/optimizer.h"
#include "engine/step_scalars.h"

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
      : Optimizer(config, std::move(segments), std::move(scalars)),
        exp_avg_(torch::zeros({numel}, torch::kFloat32)),
        exp_avg_sq_(torch::zeros({numel}, torch::kFloat32)) {}

  void step() override {
    torch::NoGradGuard no_grad;
    const StepScalars& s = scalars_of(scalars_);
    if (s.skip != 0.0) return;
    const double step_size = s.lr / s.bias_correction1;
    const double decay = 1.0 - s.lr * config_.weight_decay;
    for (const auto& seg : segments_) {
      const int64_t n = seg.master.numel();
      auto m = exp_avg_.narrow(0, seg.offset, n);
      auto v = exp_avg_sq_.narrow(0, seg.offset, n);
      const auto g = scaled_fp32_grad(seg.grad, s.grad_multiplier);
      if (decay != 1.0) {
        for (const auto& r : seg.decay_ranges) seg.master.narrow(0, r.begin, r.end - r.begin).mul_(decay);
      }
      m.lerp_(g, 1.0 - config_.beta1);
      v.mul_(config_.beta2).addcmul_(g, g, 1.0 - config_.beta2);
      const auto denom = (v.sqrt() / s.bias_correction2_sqrt).add_(config_.eps);
      seg.master.addcdiv_(m, denom, -step_size);
      seg.param.copy_(seg.master);
    }
  }
  int64_t state_bytes_per_element() const override { return 8; }
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const override {
    return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
  }

 private:
  torch::Tensor exp_avg_;     // [numel] fp32
  torch::Tensor exp_avg_sq_;  // [numel] fp32
};

class CpuSgd final : public Optimizer {
 public:
  CpuSgd(const OptimConfig& config, std::vector<OptimSegment> segments, int64_t numel, torch::Tensor scalars)
      : Optimizer(config, std::move(segments), std::move(scalars)),
        momentum_(torch::zeros({numel}, torch::kFloat32)) {}

  void step() override {
    torch::NoGradGuard no_grad;
    const StepScalars& s = scalars_of(scalars_);
    if (s.skip != 0.0) return;
    const bool first = s.applied_steps == 1.0;  // this update is the first one applied
    for (const auto& seg : segments_) {
      auto g = scaled_fp32_grad(seg.grad, s.grad_multiplier);
      for (const auto& r : seg.decay_ranges) {
        g.narrow(0, r.begin, r.end - r.begin).add_(seg.master.narrow(0, r.begin, r.end - r.begin), config_.weight_decay);
      }
      if (config_.momentum != 0.0) {
        auto buf = momentum_.narrow(0, seg.offset, seg.master.numel());
        first ? buf.copy_(g) : buf.mul_(config_.momentum).add_(g);
        if (config_.nesterov) {
          g.add_(buf, config_.momentum);
        } else {
          g = buf;
        }
      }
      seg.master.add_(g, -s.lr);
      seg.param.copy_(seg.master);
    }
  }
  int64_t state_bytes_per_element() const override { return config_.momentum != 0.0 ? 4 : 0; }
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const override {
    return {{"momentum", momentum_}};
  }

 private:
  torch::Tensor momentum_;  // [numel] fp32
};

}  // namespace

std::unique_ptr<Optimizer> make_cpu_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                              int64_t numel, torch::Tensor step_scalars) {
  switch (config.name) {
    case OptimizerKind::adamw: return std::make_unique<CpuAdamW>(config, std::move(segments), numel, std::move(step_scalars));
    case OptimizerKind::sgd: return std::make_unique<CpuSgd>(config, std::move(segments), numel, std::move(step_scalars));
  }
  ZEST_FAIL("unknown optimizer kind");
}

}  // namespace zest
