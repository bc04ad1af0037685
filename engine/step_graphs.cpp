// Whole steps captured and replayed (see step_graphs.h): the shape cache, warm-up, capture and replay.
#include "engine/step_graphs.h"

#include "core/check.h"
#include "core/number_text.h"
#include "engine/cuda_graph.h"

#include <iostream>
#include <sstream>

namespace zest {

struct StepGraphs::Shape {
  int eager_steps = 0;                    // run before the capture
  std::vector<Inputs> static_inputs;      // the graph reads its micro-batches here
  torch::Tensor losses;                   // [accumulation_steps] float32: the graph writes them here
  std::unique_ptr<CapturedGraph> graph;
};

namespace {

void say(const Engine& engine, const std::string& message) {
  if (engine.comm().rank() == 0) std::cerr << "zest: " << message << "\n";
}

}  // namespace

std::string shape_key(const std::vector<StepGraphs::Inputs>& micro_batches) {
  std::ostringstream key;
  for (const auto& inputs : micro_batches) {
    for (const auto& [name, t] : inputs) {
      key << name << ':' << c10::toString(t.scalar_type()) << '@' << t.device() << '[';
      for (int64_t d = 0; d < t.dim(); ++d) key << (d ? "," : "") << t.size(d);
      key << "];";
    }
    key << '|';
  }
  return key.str();
}

StepGraphs::StepGraphs(Engine& engine, std::vector<torch::Generator> generators, int max_graphs)
    : engine_(engine), max_graphs_(max_graphs) {
  ZEST_CHECK(max_graphs >= 1, "StepGraphs: max_graphs must be >= 1, got ", max_graphs);
  if (engine.config().cuda_graphs == CudaGraphs::off) {
    disabled_reason_ = "engine.cuda_graphs = \"off\"";
    return;
  }
  disabled_reason_ = engine.capture_blocker();
  for (const auto& generator : generators) {
    if (disabled_reason_.empty() && generator.device() != engine.device())
      disabled_reason_ = "a noise generator is on " + generator.device().str() + ", not the engine's device";
  }
  if (!disabled_reason_.empty()) {
    if (engine.device().is_cuda()) say(engine, "CUDA graphs off (every step runs eagerly): " + disabled_reason_);
    return;
  }
#ifdef ZEST_WITH_CUDA
  device_ = make_graph_device(engine.device(), std::move(generators));
  // The caller's stream's cache cannot serve the step stream's tensors (the caching allocator keeps each
  // stream's freed blocks for that stream): the engine's construction-time gradients (the fp32 gradients'
  // size) would otherwise stay reserved beside the warm-up steps' own cache.
  device_->release_cached_memory();
  device_->enter();
  engine.rebind_grad_hooks();  // the accumulators belong to the step stream from now on
  device_->leave();
#else
  disabled_reason_ = "this build has no CUDA";
#endif
}

StepGraphs::~StepGraphs() = default;

torch::Tensor StepGraphs::eager_step(const std::vector<Inputs>& micro_batches, const LossFn& loss_of) {
  std::vector<torch::Tensor> losses;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const torch::Tensor loss = loss_of(micro_batches[m], static_cast<int>(m));
    losses.push_back(loss.detach().to(torch::kFloat32).reshape({}));
    engine_.backward(loss);
  }
  engine_.step();
  return torch::stack(losses);
}

StepGraphs::Shape* StepGraphs::shape_for(const std::vector<Inputs>& micro_batches) {
  const std::string key = shape_key(micro_batches);
  auto found = shapes_.find(key);
  if (found != shapes_.end()) return found->second.get();
  if (static_cast<int>(shapes_.size()) >= max_graphs_) {
    if (!said_cache_full_) {
      say(engine_, "CUDA graphs: " + std::to_string(max_graphs_) +
                       " input shapes captured already; steps of other shapes run eagerly");
      said_cache_full_ = true;
    }
    return nullptr;
  }
  return shapes_.emplace(key, std::make_unique<Shape>()).first->second.get();
}

torch::Tensor StepGraphs::step(const std::vector<Inputs>& micro_batches, const LossFn& loss_of) {
  const int accumulation = engine_.config().accumulation_steps;
  ZEST_CHECK(static_cast<int>(micro_batches.size()) == accumulation, "StepGraphs::step: ", micro_batches.size(),
             " micro-batches for engine.accumulation_steps = ", accumulation);
  if (!device_) return eager_step(micro_batches, loss_of);
  Shape* shape = disabled_reason_.empty() ? shape_for(micro_batches) : nullptr;  // null: this step runs eagerly

  device_->enter();
  for (const auto& inputs : micro_batches)
    for (const auto& [name, t] : inputs) device_->used_on_step_stream(t);
  torch::Tensor losses;
  try {
    if (shape == nullptr || shape->eager_steps < kWarmupSteps) {
      if (shape != nullptr) ++shape->eager_steps;
      losses = eager_step(micro_batches, loss_of);
    } else if (!shape->graph && !engine_.capture_blocker().empty()) {
      // Learnt in the eager steps (a checkpointed unit drawing random numbers): every step eager from now on.
      disabled_reason_ = engine_.capture_blocker();
      say(engine_, "CUDA graphs off (every step runs eagerly): " + disabled_reason_);
      losses = eager_step(micro_batches, loss_of);
    } else {
      if (!shape->graph) {
        make_static_inputs(*shape, micro_batches);
        capture(*shape, loss_of);
      }
      losses = replay(*shape, micro_batches);
    }
  } catch (...) {
    try {
      device_->leave();
    } catch (...) {  // the stream of a failed capture may refuse the event: the first error is the one to report
    }
    throw;
  }
  device_->used_on_caller_stream(losses);
  device_->leave();
  return losses;
}

void StepGraphs::make_static_inputs(Shape& shape, const std::vector<Inputs>& micro_batches) {
  torch::NoGradGuard no_grad;
  for (const auto& inputs : micro_batches) {
    Inputs copy;
    for (const auto& [name, t] : inputs) copy[name] = torch::empty_like(t);
    shape.static_inputs.push_back(std::move(copy));
  }
}

void StepGraphs::capture(Shape& shape, const LossFn& loss_of) {
  if (captures_ == 0) eager_cache_bytes_ = device_->release_cached_memory();  // the graph's pool replaces it
  const int accumulation = engine_.config().accumulation_steps;
  shape.losses = torch::zeros({accumulation}, torch::TensorOptions().dtype(torch::kFloat32).device(engine_.device()));
  const int64_t reserved_before = device_->reserved_bytes();
  shape.graph = device_->new_graph();
  engine_.begin_step_capture();
  shape.graph->begin_capture();
  try {
    for (int m = 0; m < accumulation; ++m) {
      const torch::Tensor loss = loss_of(shape.static_inputs[static_cast<size_t>(m)], m);
      shape.losses.select(0, m).copy_(loss.detach().to(torch::kFloat32).reshape({}));
      engine_.backward(loss);
    }
    engine_.step();
    shape.graph->end_capture();
  } catch (const c10::OutOfMemoryError&) {  // reported as any out-of-memory in a step is
    shape.graph->abort_capture();
    throw;
  } catch (const std::exception& e) {
    shape.graph->abort_capture();
    const std::string what = e.what();
    ZEST_FAIL("capturing a training step as a CUDA graph failed (", what.substr(0, what.find('\n')),
              "); set engine.cuda_graphs = \"off\" to run every step eagerly");
  }
  engine_.end_step_capture();
  pool_bytes_ += device_->reserved_bytes() - reserved_before;
  if (captures_ == 0) {
    say(engine_, "CUDA graphs: steps are captured (after " + std::to_string(kWarmupSteps) +
                     " eager ones per batch shape) and replayed; the graphs' memory pool holds " +
                     gigabytes_text(pool_bytes_) + " (the eager steps' cache held " +
                     gigabytes_text(eager_cache_bytes_) + ")");
  }
  ++captures_;
}

torch::Tensor StepGraphs::replay(Shape& shape, const std::vector<Inputs>& micro_batches) {
  torch::NoGradGuard no_grad;
  for (size_t m = 0; m < micro_batches.size(); ++m)
    for (const auto& [name, t] : micro_batches[m]) shape.static_inputs[m].at(name).copy_(t);
  shape.graph->replay();
  engine_.finish_replayed_step();
  ++replays_;
  return shape.losses.clone();
}

}  // namespace zest
