// MpiCommunicator: collectives over CPU tensors with OpenMPI's non-blocking calls. 16-bit floats are
// reduced through fp32 staging buffers (MPI has no bf16/fp16 arithmetic), so reductions are exact to fp32.
// A collective not done within engine.collective_timeout_s ends the rank naming it and the late ranks.
#pragma once

#include "comm/communicator.h"

#include <mpi.h>

#include <memory>

namespace zest {

class PeerWatch;

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm` so zest's traffic never matches a user's messages.
  MpiCommunicator(MPI_Comm comm, int local_rank, int local_size);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string backend() const override { return "mpi"; }

  WorkHandle allreduce(const torch::Tensor& tensor, ReduceOp op) override;
  WorkHandle reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                            ReduceOp op) override;
  WorkHandle allgather(const torch::Tensor& input, const torch::Tensor& output) override;
  WorkHandle broadcast(const torch::Tensor& tensor, int root) override;
  void barrier() override;

  // Starts the heartbeat board (comm/peer_watch.h, a TCP store rank 0 hosts on a free port) through
  // which a timed-out collective names the ranks that never arrived. Collective; if no rank can reach
  // the board, timeouts still end the rank, naming no one.
  void watch_peers();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::shared_ptr<PeerWatch> watch_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
};

}  // namespace zest
