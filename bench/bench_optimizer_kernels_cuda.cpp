// The optimizer pass on one GPU: zest's fused AdamW kernel (optim/fused_optimizer.cu, through
// make_optimizer as the engine builds it) against ATen's `_fused_adamw_` followed by the cast copy into
// the compute-dtype parameters that zest's kernel writes in the same pass. fp32 master, gradient and
// state, bf16 parameters, 64 segments each with weight decay on its first 95% (biases and norms are the
// rest). Prints one JSON line per size: ms per step (CUDA events, median of 20), effective GB/s, and
// the largest difference between the two updated masters after one identical step.
//   bench_optimizer_kernels_cuda [ELEMENTS ...]     (default: the per-GPU shards of the anchors' runs)
#include "optim/optimizer.h"
#include "engine/step_scalars.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adamw.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

using namespace zest;

constexpr int kSegments = 64;
constexpr double kDecayShare = 0.95;
constexpr int kTimedRuns = 20;

struct Buffers {
  torch::Tensor master, grad, param, exp_avg, exp_avg_sq;
};

Buffers make_buffers(int64_t n, const torch::Tensor& init_master, const torch::Tensor& init_grad) {
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  return {init_master.clone(), init_grad.clone(), init_master.to(torch::kBFloat16), torch::zeros({n}, f32),
          torch::zeros({n}, f32)};
}

int64_t segment_begin(int64_t n, int s) { return n * s / kSegments; }
int64_t decay_end(int64_t begin, int64_t end) {
  return begin + static_cast<int64_t>(static_cast<double>(end - begin) * kDecayShare);
}

double median_ms(const std::function<void()>& pass) {
  for (int i = 0; i < 3; ++i) pass();
  std::vector<double> ms;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  for (int i = 0; i < kTimedRuns; ++i) {
    cudaEventRecord(start, stream);
    pass();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float elapsed = 0.0f;
    cudaEventElapsedTime(&elapsed, start, stop);
    ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// zest's pass: the optimizer the engine builds on CUDA, with the scalars of step 1 and no clipping.
std::unique_ptr<Optimizer> zest_optimizer(const OptimConfig& config, Buffers& b, int64_t n) {
  std::vector<OptimSegment> segments;
  for (int s = 0; s < kSegments; ++s) {
    const int64_t begin = segment_begin(n, s), end = segment_begin(n, s + 1);
    OptimSegment seg;
    seg.in_flat = {begin, end - begin};
    seg.master = b.master.slice(0, begin, end);
    seg.grad = b.grad.slice(0, begin, end);
    seg.param = b.param.slice(0, begin, end);
    seg.decay_spans = {{0, decay_end(begin, end) - begin}};
    segments.push_back(std::move(seg));
  }
  StepScalars s;
  s.lr = config.lr;
  s.applied = 1.0;
  s.applied_steps = 1.0;
  s.bias_correction1 = 1.0 - config.beta1;
  s.bias_correction2_sqrt = std::sqrt(1.0 - config.beta2);
  auto scalars = torch::from_blob(&s, {kStepScalarCount}, torch::kFloat64).to(torch::kCUDA);
  return make_optimizer(config, std::move(segments), n, scalars);
}

// ATen's pass, as torch.optim.AdamW(fused=True) runs it: the step counters advanced, one `_fused_adamw_`
// call per weight-decay group (lists of the segments' views), the
// gradient multiplier as a device scale and the skip flag as found_inf (what zest's scalars carry), then
// the cast copy into the bf16 parameters.
std::function<void()> aten_pass(const OptimConfig& config, Buffers& b, int64_t n) {
  struct Group {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    double weight_decay = 0.0;
  };
  auto groups = std::make_shared<std::array<Group, 2>>();
  (*groups)[0].weight_decay = config.weight_decay;
  const auto step_options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  for (int s = 0; s < kSegments; ++s) {
    const int64_t begin = segment_begin(n, s), end = segment_begin(n, s + 1), mid = decay_end(begin, end);
    for (int g = 0; g < 2; ++g) {
      const int64_t from = g == 0 ? begin : mid, to = g == 0 ? mid : end;
      auto& group = (*groups)[static_cast<size_t>(g)];
      group.params.push_back(b.master.slice(0, from, to));
      group.grads.push_back(b.grad.slice(0, from, to));
      group.exp_avgs.push_back(b.exp_avg.slice(0, from, to));
      group.exp_avg_sqs.push_back(b.exp_avg_sq.slice(0, from, to));
      group.steps.push_back(torch::zeros({}, step_options));
    }
  }
  const auto grad_scale = torch::ones({}, step_options);
  const auto found_inf = torch::zeros({}, step_options);
  return [=, &b] {
    for (auto& g : *groups) {
      at::_foreach_add_(g.steps, 1);  // as torch.optim.AdamW(fused=True) does before the kernel
      at::_fused_adamw_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, {}, g.steps, config.lr, config.beta1,
                        config.beta2, g.weight_decay, config.eps, false, false, grad_scale, found_inf);
    }
    b.param.copy_(b.master);
  };
}

nlohmann::json compare(int64_t n) {
  OptimConfig config;  // AdamW, lr 1e-4, betas 0.9/0.999, wd 0.01: the anchors' settings
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  const auto init_master = torch::randn({n}, f32) * 0.02;
  const auto init_grad = torch::randn({n}, f32) * 1e-3;

  // One identical step from the same state, then the difference of the two masters.
  Buffers ours = make_buffers(n, init_master, init_grad);
  auto optimizer = zest_optimizer(config, ours, n);
  optimizer->step();
  Buffers theirs = make_buffers(n, init_master, init_grad);
  const auto aten_step = aten_pass(config, theirs, n);
  aten_step();
  const double update = (ours.master - init_master).abs().max().item<double>();
  const double difference = (ours.master - theirs.master).abs().max().item<double>();
  const bool params_equal = ours.param.equal(theirs.param);

  const double zest_ms = median_ms([&] { optimizer->step(); });
  const double aten_ms = median_ms(aten_step);
  const double cast_ms = median_ms([&] { theirs.param.copy_(theirs.master); });
  // Bytes each element moves: zest reads master, m, v, grad (16) and writes master, m, v, param (14);
  // ATen's pass moves 28 and its copy 6 more.
  const double gb = static_cast<double>(n) / 1e9;
  return {{"elements", n},
          {"zest_ms", zest_ms},
          {"zest_gb_per_s", 30.0 * gb / (zest_ms / 1e3)},
          {"aten_fused_adamw_plus_cast_ms", aten_ms},
          {"aten_gb_per_s", 34.0 * gb / (aten_ms / 1e3)},
          {"cast_copy_ms", cast_ms},  // part of the ATen figure: what zest's kernel folds in
          {"max_update", update},
          {"max_master_difference", difference},
          {"bf16_params_equal", params_equal}};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) {  // per-GPU shards: SD1.5 on 2 GPUs and 1, HY-Motion 1B on 2, SDXL on 2
    sizes = {429'760'482, 859'520'964, 521'434'341, 1'283'731'842};
  }
  for (const int64_t n : sizes) {
    std::printf("%s\n", compare(n).dump().c_str());
    std::fflush(stdout);
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
  return 0;
}
