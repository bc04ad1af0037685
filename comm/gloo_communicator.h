// GlooCommunicator: collectives over CPU tensors for ranks started without MPI (torchrun, `zest launch`,
// srun, Horovod's Gloo mode): rendezvous through a TCP store (comm/rendezvous.h), transport by Gloo,
// and a collective that fails or outlasts engine.collective_timeout_s names the ranks that never came.
#pragma once

#include "comm/communicator.h"
#include "comm/launch_env.h"

#include <chrono>
#include <memory>
#include <string>

namespace zest {

// 16-bit floats are reduced through fp32 staging buffers, as in MpiCommunicator. Gloo (in LibTorch
// 1.13) has no reduce-scatter, so it is an allreduce of the whole input followed by a copy of the own
// slice: correct, with world-size times the traffic of a real reduce-scatter.
class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(const WorldInfo& world);  // blocks until every rank has joined
  ~GlooCommunicator() override;

  int rank() const override { return world_.rank; }
  int size() const override { return world_.size; }
  int local_rank() const override { return world_.local_rank; }
  int local_size() const override { return world_.local_size; }
  std::string backend() const override { return "gloo"; }

  WorkHandle allreduce(const torch::Tensor& tensor, ReduceOp op) override;
  WorkHandle reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                            ReduceOp op) override;
  WorkHandle allgather(const torch::Tensor& input, const torch::Tensor& output) override;
  WorkHandle broadcast(const torch::Tensor& tensor, int root) override;
  void barrier() override;

  struct Impl;  // the c10d store and process group (kept out of this header: c10d's headers are heavy)

 private:
  WorldInfo world_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace zest
