// SelfCommunicator: the world of one. Every collective is a copy (or nothing), so single-process runs
// go through exactly the same engine code as distributed ones.
#pragma once

#include "comm/communicator.h"

namespace zest {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string backend() const override { return "self"; }

  WorkHandle allreduce(const torch::Tensor&, ReduceOp) override;
  WorkHandle reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                            ReduceOp) override;
  WorkHandle allgather(const torch::Tensor& input, const torch::Tensor& output) override;
  WorkHandle broadcast(const torch::Tensor&, int root) override;
  void barrier() override {}
};

}  // namespace zest
