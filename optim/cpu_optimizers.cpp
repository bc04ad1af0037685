// The optimizer on the CPU: the configured rule's host pass (optim/host_update.h) over every decay run of
// every segment, split over the intra-op threads (each element's update is independent, so the split
// does not change the result). The offloaded optimizer runs the same pass, so both agree bitwise.
#include "core/check.h"
#include "optim/host_update.h"
#include "optim/optimizer.h"
#include "optim/step_scalars.h"

#include <ATen/Parallel.h>

namespace zest {
namespace {

class CpuOptimizer final : public Optimizer {
 public:
  CpuOptimizer(const OptimConfig& config, std::vector<OptimSegment> segments, int64_t numel, torch::Tensor scalars)
      : Optimizer(config, std::move(segments), std::move(scalars), numel, torch::TensorOptions()) {
    for (const auto& seg : segments_) {
      ZEST_CHECK(seg.master.is_contiguous() && seg.grad.is_contiguous() && seg.param.is_contiguous(),
                 "CPU optimizer: segments must be contiguous");
      // Other dtypes are refused here, not mid-step.
      ZEST_CHECK(is_host_update_dtype(seg.grad.scalar_type()) && is_host_update_dtype(seg.param.scalar_type()),
                 "CPU optimizer: gradient ", seg.grad.scalar_type(), " and parameter ", seg.param.scalar_type(),
                 " dtypes must each be fp32, bf16 or fp16");
    }
  }

  void step() override {
    // The scalars tensor is on the CPU here, so it is read directly.
    const StepScalars& s = *reinterpret_cast<const StepScalars*>(scalars_.data_ptr<double>());
    if (s.skip != 0.0) return;
    const StepValues step = step_values(s);
    constexpr int64_t kGrain = 1 << 15;
    for (const auto& seg : segments_) {
      for (const auto& [range, decay] : decay_runs(seg)) {
        at::parallel_for(range.begin, range.end, kGrain, [&](int64_t begin, int64_t end) {
          host_update(config_.name, hyper_, step, decay, range_of(seg, begin, end));
        });
      }
    }
  }

 private:
  HostRange range_of(const OptimSegment& seg, int64_t begin, int64_t end) const {
    const int64_t at = seg.offset + begin;  // in the flat state buffers
    return {seg.master.data_ptr<float>() + begin,
            {state_at(0, at), state_at(1, at)},
            static_cast<const char*>(seg.grad.data_ptr()) + begin * seg.grad.element_size(),
            seg.grad.scalar_type(),
            static_cast<char*>(seg.param.data_ptr()) + begin * seg.param.element_size(),
            seg.param.scalar_type(),
            end - begin};
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_cpu_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                              int64_t numel, torch::Tensor step_scalars) {
  return std::make_unique<CpuOptimizer>(config, std::move(segments), numel, std::move(step_scalars));
}

}  // namespace zest
