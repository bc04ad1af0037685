// Communicator: the collective operations the engine needs (allreduce, reduce-scatter, allgather,
// broadcast, barrier), asynchronous by default, on fp32/bf16/fp16/int tensors. Implementations: MPI and
// Gloo over CPU tensors, a world of one (self), and NCCL over CUDA tensors (nccl_communicator.h).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace zest {

// avg divides the sum by the world size (NCCL does it in the collective; the CPU backends after it).
enum class ReduceOp { sum, max, avg };

// Handle of an in-flight collective. The handle keeps every buffer the operation touches alive until it
// is waited on; destroying an unwaited handle waits, so buffers are never freed under a collective.
//
// wait() orders the collective before what the caller does next. On the CPU backends it blocks until the
// data is there. On CUDA (NCCL) it never blocks the host: it makes the caller's current CUDA stream wait
// for the collective's event, so kernels queued afterwards see the result (the design's "waiting on a
// handle makes a stream wait").
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Orders the collective's results before the current stream's next work but keeps the tensors it holds
  // until wait(), which the stream that frees them calls later (the engine's updates during backward run
  // on a stream of their own). Host backends have nothing to keep: they wait here.
  virtual void order_before_current_stream() { wait(); }
};
using WorkHandle = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "gloo", "self", "nccl"

  // All tensors must be contiguous. Sizes are in elements of the tensors' own dtype.
  // In place: tensor ← op over ranks of tensor.
  virtual WorkHandle allreduce(const torch::Tensor& tensor, ReduceOp op) = 0;
  // input [size·n] → output [n]: output on rank r = op over ranks of input[r·n, (r+1)·n).
  // input and output may differ in dtype (e.g. bf16 gradients reduced into an fp32 shard); the
  // reduction itself runs in the output's dtype precision or better. output may be input's own slot
  // (input[r·n, (r+1)·n)), which reduces in place.
  virtual WorkHandle reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                                    ReduceOp op) = 0;
  // input [n] → output [size·n], rank r's input at [r·n, (r+1)·n). input may alias that slice.
  virtual WorkHandle allgather(const torch::Tensor& input, const torch::Tensor& output) = 0;
  virtual WorkHandle broadcast(const torch::Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;

  // ---- grouped collectives: several tensors in one operation (a bucket of units) ----
  // Each pair (inputs[i], outputs[i]) follows the single-tensor contract above. The CPU backends pack
  // the pieces rank-major into one buffer (so rank r receives exactly each piece's slice r) and run one
  // collective; NCCL issues the pieces inside one group. accumulate = true adds the reduced values to
  // outputs instead of overwriting them (gradient accumulation into a persistent shard), done after the
  // collective on the communication side, never on the caller's stream.
  virtual WorkHandle reduce_scatter_many(const std::vector<torch::Tensor>& inputs,
                                         const std::vector<torch::Tensor>& outputs, ReduceOp op,
                                         bool accumulate = false);
  virtual WorkHandle allgather_many(const std::vector<torch::Tensor>& inputs,
                                    const std::vector<torch::Tensor>& outputs);
  virtual WorkHandle allreduce_many(const std::vector<torch::Tensor>& tensors, ReduceOp op);

  // Blocking conveniences (on CUDA, "blocking" for the current stream; see Work).
  void allreduce_sync(const torch::Tensor& t, ReduceOp op) { allreduce(t, op)->wait(); }
  void broadcast_sync(const torch::Tensor& t, int root) { broadcast(t, root)->wait(); }
  // Broadcasts a string from root (length first, then bytes). Control message: CPU tensors.
  std::string broadcast_string(const std::string& value, int root);
  // True on every rank iff `flag` is true on at least one rank. Control message: CPU tensors.
  bool any(bool flag);
};

// A completed operation (nothing to wait for).
class DoneWork final : public Work {
 public:
  void wait() override {}
};

// A collective followed by host-side work once it completed (unpacking a packed buffer, adding into an
// accumulator): wait() waits for `inner`, then runs `then` once. Keeps `keep_alive` until then.
class ThenWork final : public Work {
 public:
  ThenWork(WorkHandle inner, std::function<void()> then, std::vector<torch::Tensor> keep_alive = {});
  ~ThenWork() override;
  void wait() override;

 private:
  WorkHandle inner_;
  std::function<void()> then_;
  std::vector<torch::Tensor> keep_alive_;
  bool done_ = false;
};

}  // namespace zest
