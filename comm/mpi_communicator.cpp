// MPI collectives over CPU tensors. Each operation returns an MpiWork that owns the request, the
// tensors it touches (kept alive until completion) and the copy-back from any staging buffer.
#include "comm/mpi_communicator.h"

#include "comm/collective_timeout.h"
#include "comm/cpu_collective_rules.h"
#include "comm/exposure.h"
#include "comm/net_interface.h"
#include "comm/peer_watch.h"
#include "comm/rendezvous.h"

#include "core/check.h"
#include "core/compat.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstring>
#include <climits>
#include <thread>
#include <functional>
#include <sstream>
#include <vector>

namespace zest {
namespace {

class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, std::vector<torch::Tensor> keep_alive, std::function<void()> finish, const char* what,
          PeerWatch* watch)
      : request_(request), keep_alive_(std::move(keep_alive)), finish_(std::move(finish)), what_(what), watch_(watch),
        sequence_(watch ? watch->next_sequence() : 0), step_(collective_step()), label_(CollectiveLabel::current()) {}
  ~MpiWork() override {
    if (!done_) {
      try {
        wait();
      } catch (...) {  // destructor must not throw; the error was already reported elsewhere
      }
    }
  }
  void wait() override {
    if (done_) return;
    done_ = true;
    const auto start = std::chrono::steady_clock::now();
    wait_with_timeout();
    if (is_exposure_timing()) {
      add_host_wait_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    if (finish_) {
      torch::NoGradGuard no_grad;
      finish_();
    }
    keep_alive_.clear();
  }

 private:
  // Polls instead of MPI_Wait so a collective that some rank never joins ends this rank with an error
  // naming the operation (collective_timeout) instead of hanging forever.
  void wait_with_timeout() {
    const auto start = std::chrono::steady_clock::now();
    const auto limit = collective_timeout();
    for (int polls = 0;; ++polls) {
      int done = 0;
      ZEST_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
      if (done) return;
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > limit) {
        ZEST_FAIL("MPI ", what_, label_.empty() ? "" : " (" + label_ + ")",
                  step_ > 0 ? str(" at step ", step_) : std::string(),
                  sequence_ > 0 ? str(", collective #", sequence_) : std::string(), " did not complete within ",
                  limit.count() / 1000.0, " s (engine.collective_timeout_s): ",
                  watch_ ? watch_->never_arrived(sequence_) : "another rank never joined it or is stuck");
      }
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  MPI_Request request_;
  std::vector<torch::Tensor> keep_alive_;
  std::function<void()> finish_;
  const char* what_;
  PeerWatch* watch_;  // the communicator's, which outlives its works; may be null
  int64_t sequence_;
  int64_t step_;
  std::string label_;
  bool done_ = false;
};

// MPI datatype for arithmetic on a dtype (16-bit floats are staged, so they never get here).
MPI_Datatype arithmetic_type(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return MPI_FLOAT;
    case torch::kFloat64: return MPI_DOUBLE;
    case torch::kInt64: return MPI_INT64_T;
    case torch::kInt32: return MPI_INT32_T;
    case torch::kUInt8: return MPI_UINT8_T;
    default: ZEST_FAIL("MPI reduction on dtype ", dtype, " is not supported");
  }
}

// avg is a sum divided by the world size once the sum has arrived (see finish_average).
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

int checked_count(int64_t count, const char* what) {
  ZEST_CHECK(count <= INT_MAX, what, ": ", count, " elements exceed MPI's int count; split the unit");
  return static_cast<int>(count);
}

void check_mpi_operand(const torch::Tensor& t, const char* what) { check_cpu_contiguous(t, what, "MPI"); }

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int local_rank, int local_size)
    : local_rank_(local_rank), local_size_(local_size) {
  ZEST_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  ZEST_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ZEST_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

WorkHandle MpiCommunicator::allreduce(const torch::Tensor& tensor, ReduceOp op) {
  check_mpi_operand(tensor, "allreduce");
  const torch::Dtype compute = reduction_dtype(tensor.scalar_type());
  torch::Tensor buffer = compute == tensor.scalar_type() ? tensor : tensor.to(compute);
  MPI_Request request;
  ZEST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, compat::mutable_data(buffer),
                                checked_count(buffer.numel(), "allreduce"),
                                arithmetic_type(compute), mpi_op(op), comm_, &request));
  const double divisor = op == ReduceOp::avg ? size_ : 1.0;
  std::function<void()> finish;
  if (!buffer.is_same(tensor) || divisor != 1.0) {
    finish = [tensor, buffer, divisor] {
      if (divisor != 1.0) buffer.div_(divisor);
      if (!buffer.is_same(tensor)) tensor.copy_(buffer);
    };
  }
  return std::make_unique<MpiWork>(request, std::vector<torch::Tensor>{tensor, buffer}, finish, "allreduce", watch_.get());
}

WorkHandle MpiCommunicator::reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                                           ReduceOp op) {
  check_mpi_operand(input, "reduce_scatter input");
  check_mpi_operand(output, "reduce_scatter output");
  const int64_t n = output.numel();
  ZEST_CHECK(input.numel() == n * size_, "reduce_scatter: input has ", input.numel(),
             " elements, expected world size ", size_, " x output ", n);
  // Reduce in the wider of the two dtypes (an fp32 output of bf16 gradients reduces in fp32).
  torch::Dtype compute = reduction_dtype(output.scalar_type());
  if (reduction_dtype(input.scalar_type()) == torch::kFloat64) compute = torch::kFloat64;
  torch::Tensor send = input.scalar_type() == compute ? input : input.to(compute);
  const bool direct = output.scalar_type() == compute && !overlaps(send, output);
  torch::Tensor recv = direct ? output : torch::empty({n}, output.options().dtype(compute));
  MPI_Request request;
  ZEST_MPI_CHECK(MPI_Ireduce_scatter_block(compat::const_data(send), compat::mutable_data(recv),
                                           checked_count(n, "reduce_scatter"),
                                           arithmetic_type(compute), mpi_op(op), comm_, &request));
  const double divisor = op == ReduceOp::avg ? size_ : 1.0;
  std::function<void()> finish;
  if (!direct || divisor != 1.0) {
    finish = [output, recv, divisor] {
      if (divisor != 1.0) recv.div_(divisor);
      if (!recv.is_same(output)) output.copy_(recv.view_as(output));
    };
  }
  return std::make_unique<MpiWork>(request, std::vector<torch::Tensor>{input, send, recv, output},
                                   finish, "reduce_scatter", watch_.get());
}

WorkHandle MpiCommunicator::allgather(const torch::Tensor& input, const torch::Tensor& output) {
  check_mpi_operand(input, "allgather input");
  check_mpi_operand(output, "allgather output");
  ZEST_CHECK(input.scalar_type() == output.scalar_type(), "allgather: input dtype ",
             input.scalar_type(), " differs from output dtype ", output.scalar_type());
  const int64_t n = input.numel();
  ZEST_CHECK(output.numel() == n * size_, "allgather: output has ", output.numel(),
             " elements, expected world size ", size_, " x input ", n);
  const int64_t bytes = n * static_cast<int64_t>(input.element_size());
  const char* own_slot = static_cast<const char*>(output.data_ptr()) + rank_ * bytes;
  const bool in_place = input.data_ptr() == own_slot;
  ZEST_CHECK(in_place || !overlaps(input, output),
             "allgather: input overlaps output but is not this rank's slot");
  MPI_Request request;
  ZEST_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : compat::const_data(input),
                                checked_count(bytes, "allgather"), MPI_BYTE,
                                compat::mutable_data(output), checked_count(bytes, "allgather"),
                                MPI_BYTE, comm_, &request));
  return std::make_unique<MpiWork>(request, std::vector<torch::Tensor>{input, output}, nullptr, "allgather", watch_.get());
}

WorkHandle MpiCommunicator::broadcast(const torch::Tensor& tensor, int root) {
  check_mpi_operand(tensor, "broadcast");
  ZEST_CHECK(root >= 0 && root < size_, "broadcast root ", root, " outside world of size ", size_);
  MPI_Request request;
  ZEST_MPI_CHECK(MPI_Ibcast(compat::mutable_data(tensor), checked_count(tensor.nbytes(), "broadcast"),
                            MPI_BYTE, root, comm_, &request));
  return std::make_unique<MpiWork>(request, std::vector<torch::Tensor>{tensor}, nullptr, "broadcast", watch_.get());
}

void MpiCommunicator::barrier() { ZEST_MPI_CHECK(MPI_Barrier(comm_)); }

namespace {

// Rank 0's string on every rank.
std::string broadcast_text(MPI_Comm comm, int rank, std::string text) {
  int length = static_cast<int>(text.size());
  ZEST_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, 0, comm));
  text.resize(static_cast<size_t>(length));
  ZEST_MPI_CHECK(MPI_Bcast(text.data(), length, MPI_CHAR, 0, comm));
  return text;
}

}  // namespace

void MpiCommunicator::watch_peers() {
  constexpr int kHostBytes = 64;
  std::vector<char> hosts(static_cast<size_t>(kHostBytes) * size_, '\0');
  std::string own = host_name_of_this_machine().substr(0, kHostBytes - 1);
  std::memcpy(hosts.data() + static_cast<size_t>(rank_) * kHostBytes, own.data(), own.size());
  ZEST_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hosts.data(), kHostBytes, MPI_CHAR, comm_));
  Rendezvous board;
  for (int r = 0; r < size_; ++r) {
    PeerInfo p;
    p.rank = r;
    p.host = std::string(hosts.data() + static_cast<size_t>(r) * kHostBytes);
    board.peers.push_back(p);
  }
  // Rank 0 hosts the board on a free port and offers every address of its host.
  std::string offer;
  if (rank_ == 0) {
    try {
      c10d::TCPStoreOptions options;
      options.port = 0;
      options.isServer = true;
      options.waitWorkers = false;
      options.timeout = std::chrono::seconds(10);
      auto server = c10::make_intrusive<c10d::TCPStore>("0.0.0.0", options);
      board.store = server;
      offer = std::to_string(server->getPort());
      for (const std::string& ip : local_ipv4_addresses()) offer += " " + ip;
    } catch (const std::exception&) {
      offer.clear();  // no board: timeouts name no rank
    }
  }
  offer = broadcast_text(comm_, rank_, offer);
  std::istringstream in(offer);
  in >> board.port;
  std::shared_ptr<PeerWatch> watch;
  for (std::string ip; !watch && board.port > 0 && (in >> ip);) {
    board.host = ip;
    try {
      watch = std::make_shared<PeerWatch>(board, "zest/mpi/", rank_);
    } catch (const std::exception&) {
    }
  }
  // Every rank or none: a board some ranks cannot reach would blame them wrongly.
  int reached = watch ? 1 : 0;
  ZEST_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &reached, 1, MPI_INT, MPI_MIN, comm_));
  if (reached) watch_ = std::move(watch);
}

}  // namespace zest
