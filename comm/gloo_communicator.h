// GlooCommunicator: collectives over CPU tensors for ranks started without MPI (a torchrun-style
// environment, e.g. `zest launch`): rendezvous through a TCP store hosted by rank 0, transport by Gloo.
#pragma once

#include "comm/communicator.h"

#include <chrono>
#include <memory>
#include <string>

namespace zest {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string master_addr = "127.0.0.1";  // where rank 0 hosts the rendezvous store
  int master_port = 29500;
  // Limit for every collective: a rank that vanished or hangs makes the others fail with an error
  // naming the operation instead of waiting forever. The rendezvous waits max(timeout, 300 s), since
  // ranks may start minutes apart.
  std::chrono::seconds timeout{300};
};

// The collective timeout: ZEST_COMM_TIMEOUT_S (seconds, > 0) when set, else 300 s.
std::chrono::seconds comm_timeout_from_env();

// 16-bit floats are reduced through fp32 staging buffers, as in MpiCommunicator. Gloo (in LibTorch
// 1.13) has no reduce-scatter, so it is an allreduce of the whole input followed by a copy of the own
// slice: correct, with world-size times the traffic of a real reduce-scatter.
class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(const GlooOptions& options);  // blocks until every rank has joined
  ~GlooCommunicator() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  int local_rank() const override { return options_.local_rank; }
  int local_size() const override { return options_.local_size; }
  std::string backend() const override { return "gloo"; }

  WorkHandle allreduce(const torch::Tensor& tensor, ReduceOp op) override;
  WorkHandle reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                            ReduceOp op) override;
  WorkHandle allgather(const torch::Tensor& input, const torch::Tensor& output) override;
  WorkHandle broadcast(const torch::Tensor& tensor, int root) override;
  void barrier() override;

 private:
  struct Impl;  // the c10d store and process group (kept out of this header: c10d's headers are heavy)
  GlooOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zest
