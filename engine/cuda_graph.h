// The CUDA side of StepGraphs (engine/step_graphs.h): the stream whole steps run on, and graphs captured
// on it into one private memory pool. Implemented in cuda_graph_cuda.cpp (CUDA builds only).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace zest {

// One captured graph; replay() runs it on the step stream.
class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  virtual void begin_capture() = 0;  // the step stream records from here (this thread only)
  virtual void end_capture() = 0;
  virtual void abort_capture() = 0;  // after a failure: the stream stops recording, the partial graph goes
  virtual void replay() = 0;
};

class GraphDevice {
 public:
  virtual ~GraphDevice() = default;
  // Makes the step stream current, ordered after the caller's stream; leave() orders the caller's stream
  // after it and restores the caller's stream.
  virtual void enter() = 0;
  virtual void leave() = 0;
  // The caching allocator must not reuse `t`'s memory before the step stream (or the caller's stream)
  // is done with it: a batch made on the caller's stream, losses read there.
  virtual void used_on_step_stream(const torch::Tensor& t) = 0;
  virtual void used_on_caller_stream(const torch::Tensor& t) = 0;
  // Returns cached, unused memory to the device (before the first step: the caller's stream's cache; before
  // the first capture: the graph's pool then takes the eager steps' place instead of adding to it); returns
  // how many bytes the cache held.
  virtual int64_t release_cached_memory() = 0;
  virtual int64_t reserved_bytes() const = 0;  // what the caching allocator holds on the device, every pool
  // A graph in the shared pool that also replays the random streams of `generators` (the default CUDA
  // generator is always included).
  virtual std::unique_ptr<CapturedGraph> new_graph() = 0;
};

#ifdef ZEST_WITH_CUDA
std::unique_ptr<GraphDevice> make_graph_device(const torch::Device& device, std::vector<torch::Generator> generators);
#endif

}  // namespace zest
