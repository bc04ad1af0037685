// StepGraphs: whole training steps as CUDA graphs ([engine] cuda_graphs). A step — every micro-batch's
// forward and backward (with the bucket reductions the hooks launch on their streams), the step decision
// and the fused optimizer — is captured once per input shape and then replayed: the host launches one
// graph instead of thousands of kernels. A replay copies the micro-batches into the graph's static
// inputs and, as an eager step does, reads the learning rate, the loss scale and the skip decision from
// device memory; the noise generators replay fresh random numbers. The first steps of a shape run
// eagerly (warm-up: library autotuning, lazily built tables), the next is captured; at most
// `max_graphs` shapes are kept, others run eagerly. Every step runs on one side stream, ordered after
// and before the caller's stream. Where the engine cannot be captured (the CPU, a host optimizer, a
// checkpointed unit that draws random numbers — seen in the eager steps) every step runs eagerly, said once
// in the log.
//
//   StepGraphs graphs(engine, {generator});
//   torch::Tensor losses = graphs.step(micro_batches, [&](const StepGraphs::Inputs& in, int micro) {
//     return family.training_loss(model, in, generator);
//   });
#pragma once

#include "engine/engine.h"

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zest {

class GraphDevice;
class CapturedGraph;

class StepGraphs {
 public:
  using Inputs = std::map<std::string, torch::Tensor>;
  // The loss (a scalar) of micro-batch `micro` of a step. It must draw random numbers only from the
  // generators given to the constructor, and read nothing from the host that changes between steps.
  using LossFn = std::function<torch::Tensor(const Inputs& inputs, int micro)>;

  static constexpr int kWarmupSteps = 2;  // eager steps of a shape before its capture
  // Every graph of a run shares one memory pool (they never run at once), so a shape more costs its capture,
  // not its activations again: enough for HY-Motion's packed-token buckets at common batches.
  static constexpr int kDefaultMaxGraphs = 8;

  StepGraphs(Engine& engine, std::vector<torch::Generator> generators, int max_graphs = kDefaultMaxGraphs);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // One optimizer step over the engine's accumulation_steps micro-batches; returns their losses, float32
  // [accumulation_steps] on the engine's device (detached).
  torch::Tensor step(const std::vector<Inputs>& micro_batches, const LossFn& loss_of);

  bool is_enabled() const { return device_ != nullptr && disabled_reason_.empty(); }
  const std::string& disabled_reason() const { return disabled_reason_; }
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  // The memory the graphs' private pool took from the device (every capture), and what the eager steps'
  // cache held when the first capture released it: the cost of the graphs in memory, beside the eager one.
  int64_t pool_bytes() const { return pool_bytes_; }
  int64_t eager_cache_bytes() const { return eager_cache_bytes_; }

 private:
  struct Shape;
  Shape* shape_for(const std::vector<Inputs>& micro_batches);  // null: the cache is full, the step runs eagerly
  torch::Tensor eager_step(const std::vector<Inputs>& micro_batches, const LossFn& loss_of);
  void make_static_inputs(Shape& shape, const std::vector<Inputs>& micro_batches);
  void capture(Shape& shape, const LossFn& loss_of);
  torch::Tensor replay(Shape& shape, const std::vector<Inputs>& micro_batches);

  Engine& engine_;
  std::unique_ptr<GraphDevice> device_;  // null: every step eager
  std::string disabled_reason_;
  const int max_graphs_;
  std::map<std::string, std::unique_ptr<Shape>> shapes_;  // by shape_key of the micro-batches
  bool said_cache_full_ = false;
  int64_t captures_ = 0;
  int64_t replays_ = 0;
  int64_t pool_bytes_ = 0;
  int64_t eager_cache_bytes_ = 0;
};

// "x:f32[8,360,201];mask:b8[8,360]|…": the micro-batches' names, dtypes and sizes (the graph cache key).
std::string shape_key(const std::vector<StepGraphs::Inputs>& micro_batches);

}  // namespace zest
