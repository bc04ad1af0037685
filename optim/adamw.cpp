// AdamW and SGD (momentum) over flat fp32 shards, with exactly PyTorch's update rules:
// AdamW: p ← p·(1 − lr·wd); m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²;
//        p ← p − lr/(1−β1^t) · m / (√v/√(1−β2^t) + ε)   (ε outside the square root).
// SGD:   g ← g + wd·p; b ← μ·b + g (b = g on the first step); g ← g + μ·b (Nesterov) or b; p ← p − lr·g.
#include "optim/optimizer.h"

#include "core/check.h"

#include <cmath>

namespace zest {
namespace {

// Gradient of a segment as fp32, multiplied by the engine's combined unscale/clip factor.
torch::Tensor scaled_fp32_grad(const torch::Tensor& grad, double multiplier) {
  auto g = grad.to(torch::kFloat32);
  if (multiplier != 1.0) {
    if (g.data_ptr() == grad.data_ptr()) g = g.clone();  // never modify the engine's gradient
    g.mul_(multiplier);
  }
  return g;
}

void apply_decoupled_decay(const OptimSegment& seg, double factor) {
  if (factor == 1.0) return;
  for (const auto& r : seg.decay_ranges) seg.master.narrow(0, r.begin, r.end - r.begin).mul_(factor);
}

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimConfig& config, int64_t numel)
      : Optimizer(config),
        exp_avg_(torch::zeros({numel}, torch::kFloat32)),
        exp_avg_sq_(torch::zeros({numel}, torch::kFloat32)) {}

  void step(const std::vector<OptimSegment>& segments, const StepHyper& hyper) override {
    torch::NoGradGuard no_grad;
    ++step_count_;
    const double bias_correction1 = 1.0 - std::pow(config_.beta1, step_count_);
    const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(config_.beta2, step_count_));
    const double step_size = hyper.lr / bias_correction1;
    for (const auto& seg : segments) {
      const int64_t n = seg.master.numel();
      auto m = exp_avg_.narrow(0, seg.offset, n);
      auto v = exp_avg_sq_.narrow(0, seg.offset, n);
      const auto g = scaled_fp32_grad(seg.grad, hyper.grad_multiplier);
      apply_decoupled_decay(seg, 1.0 - hyper.lr * config_.weight_decay);
      m.lerp_(g, 1.0 - config_.beta1);
      v.mul_(config_.beta2).addcmul_(g, g, 1.0 - config_.beta2);
      const auto denom = (v.sqrt() / bias_correction2_sqrt).add_(config_.eps);
      seg.master.addcdiv_(m, denom, -step_size);
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

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimConfig& config, int64_t numel)
      : Optimizer(config), momentum_(torch::zeros({numel}, torch::kFloat32)) {}

  void step(const std::vector<OptimSegment>& segments, const StepHyper& hyper) override {
    torch::NoGradGuard no_grad;
    const bool first = step_count_ == 0;
    ++step_count_;
    for (const auto& seg : segments) {
      auto g = scaled_fp32_grad(seg.grad, hyper.grad_multiplier);
      if (g.data_ptr() == seg.grad.data_ptr()) g = g.clone();
      for (const auto& r : seg.decay_ranges) {
        g.narrow(0, r.begin, r.end - r.begin)
            .add_(seg.master.narrow(0, r.begin, r.end - r.begin), config_.weight_decay);
      }
      if (config_.momentum != 0.0) {
        auto buf = momentum_.narrow(0, seg.offset, seg.master.numel());
        if (first) {
          buf.copy_(g);
        } else {
          buf.mul_(config_.momentum).add_(g);
        }
        if (config_.nesterov) {
          g.add_(buf, config_.momentum);
        } else {
          g = buf;
        }
      }
      seg.master.add_(g, -hyper.lr);
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

std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& config, int64_t numel) {
  switch (config.name) {
    case OptimizerKind::adamw: return std::make_unique<AdamW>(config, numel);
    case OptimizerKind::sgd: return std::make_unique<Sgd>(config, numel);
  }
  ZEST_FAIL("unknown optimizer kind");
}

int64_t optimizer_state_bytes_per_element(const OptimConfig& config) {
  if (config.name == OptimizerKind::adamw) return 8;
  return config.momentum != 0.0 ? 4 : 0;
}

}  // namespace zest
