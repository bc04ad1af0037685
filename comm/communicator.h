// Communicator: the collective operations the engine needs (allreduce, reduce-scatter, allgather,
// broadcast, barrier), asynchronous by default, on fp32/bf16/fp16/int tensors. Implementations: MPI over
// CPU tensors (mpi_communicator.cpp), a world of one (self_communicator.cpp); NCCL later.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

namespace zest {

enum class ReduceOp { sum, max };

// Handle of an in-flight collective. wait() completes it (and any copy-back from staging buffers);
// the handle keeps every buffer the operation touches alive until then. Destroying an unwaited handle
// waits, so buffers are never freed under a running collective.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};
using WorkHandle = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "self", "nccl"

  // All tensors must be contiguous. Sizes are in elements of the tensors' own dtype.
  // In place: tensor ← op over ranks of tensor.
  virtual WorkHandle allreduce(const torch::Tensor& tensor, ReduceOp op) = 0;
  // input [size·n] → output [n]: output on rank r = op over ranks of input[r·n, (r+1)·n).
  // input and output may differ in dtype (e.g. bf16 gradients reduced into an fp32 shard); the
  // reduction itself runs in the output's dtype precision or better.
  virtual WorkHandle reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                                    ReduceOp op) = 0;
  // input [n] → output [size·n], rank r's input at [r·n, (r+1)·n). input may alias that slice.
  virtual WorkHandle allgather(const torch::Tensor& input, const torch::Tensor& output) = 0;
  virtual WorkHandle broadcast(const torch::Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;

  // Blocking conveniences.
  void allreduce_sync(const torch::Tensor& t, ReduceOp op) { allreduce(t, op)->wait(); }
  void broadcast_sync(const torch::Tensor& t, int root) { broadcast(t, root)->wait(); }
  // Broadcasts a string from root (length first, then bytes).
  std::string broadcast_string(const std::string& value, int root);
  // True on every rank iff `flag` is true on at least one rank.
  bool any(bool flag);
};

// A completed operation (nothing to wait for).
class DoneWork final : public Work {
 public:
  void wait() override {}
};

}  // namespace zest
