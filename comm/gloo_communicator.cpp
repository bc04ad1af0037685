// Gloo collectives over CPU tensors through the rendezvous' TCP store and ProcessGroupGloo (transport).
// Each operation returns a GlooWork that owns the c10d work, the tensors it touches and the copy-back
// from any staging buffer; a failed or timed-out collective names the operation, the bucket's units,
// the step and the ranks that never arrived (comm/peer_watch.h).
#include "comm/gloo_communicator.h"

#include "comm/collective_timeout.h"
#include "comm/cpu_collective_rules.h"
#include "comm/exposure.h"
#include "comm/net_interface.h"
#include "comm/peer_watch.h"
#include "comm/rendezvous.h"
#include "core/check.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

// Gloo's own headers: Debian ships them (libgloo-dev) beside its LibTorch; the 2.x pip wheels contain
// Gloo in libtorch_cpu but omit its headers, which ProcessGroupGloo.hpp needs. Any copy of them on the
// include path works (Debian's, 2022, was checked against 2.11, e.g. via -DZEST_THIRD_PARTY=DIR with
// DIR/include/gloo); without one this file builds a stub that says so.
#if __has_include(<gloo/algorithm.h>)
#define ZEST_HAS_GLOO 1
// ProcessGroupGloo.hpp declares its class only when USE_C10D_GLOO is set; LibTorch's CMake config
// normally sets it, so define it only where that did not happen.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#else
#define ZEST_HAS_GLOO 0
#endif

namespace zest {

#if ZEST_HAS_GLOO

// Shared by the communicator and its in-flight works: a failed collective marks the group broken, so
// that the works still queued do not wait for it and the group (whose threads may be stuck in the
// failed operation) is abandoned rather than joined at exit.
struct GlooCommunicator::Impl {
  WorldInfo world;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  std::unique_ptr<PeerWatch> watch;
  std::vector<PeerInfo> peers;
  std::atomic<bool> broken{false};
};

namespace {

using Clock = std::chrono::steady_clock;

// What a collective was, for its failure message: "allreduce of 1024 Float elements (units
// blocks.3..blocks.5) at step 7, collective #42".
struct Issue {
  std::string what;
  int64_t sequence = 0;
  int64_t step = 0;
  std::string label;
  std::string describe() const {
    return zest::str(what, label.empty() ? "" : " (" + label + ")", step > 0 ? zest::str(" at step ", step) : std::string(),
               ", collective #", sequence);
  }
};

// The one message of a failed collective, then the rank's end (thrown; the caller's error path prints it).
[[noreturn]] void fail_collective(GlooCommunicator::Impl& impl, const Issue& issue, const std::string& cause) {
  impl.broken = true;
  impl.watch->post_failure();
  const std::string who = impl.watch->never_arrived(issue.sequence);
  impl.watch->linger_for_others(collective_timeout() + std::chrono::seconds(4));
  ZEST_FAIL("Gloo ", issue.describe(), " ", cause, ": ", who);
}

class GlooWork final : public Work {
 public:
  GlooWork(std::shared_ptr<GlooCommunicator::Impl> impl, c10::intrusive_ptr<c10d::Work> work, Issue issue,
           std::vector<torch::Tensor> keep_alive, std::function<void()> finish)
      : impl_(std::move(impl)), work_(std::move(work)), issue_(std::move(issue)), keep_alive_(std::move(keep_alive)),
        finish_(std::move(finish)) {}
  ~GlooWork() override {
    if (!done_) {
      try {
        wait();
      } catch (...) {  // destructor must not throw; wait() reports the error to a caller that waits
      }
    }
  }
  void wait() override {
    if (done_) return;
    done_ = true;
    if (impl_->broken) ZEST_FAIL("Gloo ", issue_.describe(), " abandoned: an earlier collective failed");
    // Polled against engine.collective_timeout_s as it is now (the engine may have set it after the
    // group was made), so the limit is the same on the MPI, Gloo and NCCL paths.
    const auto start = Clock::now();
    const auto limit = collective_timeout();
    const std::string timed_out = zest::str("did not complete within ", limit.count() / 1000.0,
                                            " s (engine.collective_timeout_s)");
    for (int polls = 0; !work_->isCompleted(); ++polls) {
      if (Clock::now() - start > limit) fail_collective(*impl_, issue_, timed_out);
      if (polls > 200) std::this_thread::sleep_for(std::chrono::microseconds(polls > 20000 ? 2000 : 50));
    }
    try {
      work_->wait();
    } catch (const std::exception& e) {
      // Gloo's own transfer timeout is the same limit and may fire first: the same message either way.
      const std::string what = e.what();
      if (what.find("Timed out") != std::string::npos) fail_collective(*impl_, issue_, timed_out);
      fail_collective(*impl_, issue_, "failed (" + what.substr(0, what.find('\n')) + ")");
    }
    if (is_exposure_timing()) {
      add_host_wait_ms(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    if (finish_) {
      torch::NoGradGuard no_grad;
      finish_();
    }
    keep_alive_.clear();
  }

 private:
  std::shared_ptr<GlooCommunicator::Impl> impl_;
  c10::intrusive_ptr<c10d::Work> work_;
  Issue issue_;
  std::vector<torch::Tensor> keep_alive_;
  std::function<void()> finish_;
  bool done_ = false;
};

c10d::AllreduceOptions allreduce_options(ReduceOp op) {
  c10d::AllreduceOptions options;
  // avg: a sum, divided by the world size once it has arrived.
  options.reduceOp = op == ReduceOp::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  return options;
}

void check_gloo_operand(const torch::Tensor& t, const char* what) { check_cpu_contiguous(t, what, "Gloo"); }

// Data movement (broadcast, allgather) is dtype-blind: send every dtype as bytes, so bf16 and bool
// need no Gloo support.
torch::Tensor as_bytes(const torch::Tensor& t) { return t.reshape({-1}).view(torch::kUInt8); }

// Makes the group on a thread of its own, so that a stop signal or a peer that died after joining
// ends this rank within a second instead of after Gloo's connect timeout. On an early end the thread
// is left behind (detached, owning what it uses); the process is about to exit.
c10::intrusive_ptr<c10d::ProcessGroupGloo> connect_group(GlooCommunicator::Impl& impl,
                                                         std::shared_ptr<::gloo::transport::Device> device) {
  struct Pending {
    std::mutex mutex;
    bool done = false;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
    std::string error;
  };
  auto pending = std::make_shared<Pending>();
  const WorldInfo& w = impl.world;
  auto options = c10d::ProcessGroupGloo::Options::create(collective_timeout());
  options->devices.push_back(std::move(device));
  auto store = c10::make_intrusive<c10d::PrefixStore>(w.store_prefix + "gloo/", impl.store);
  std::thread([pending, store, options, rank = w.rank, size = w.size] {
    c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
    std::string error;
    try {
      group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(pending->mutex);
    pending->group = std::move(group);
    pending->error = error.empty() ? "" : error.substr(0, error.find('\n'));
    pending->done = true;
  }).detach();
  const auto start = Clock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(pending->mutex);
      if (pending->done) {
        if (!pending->error.empty()) {
          impl.broken = true;
          ZEST_FAIL("Gloo: could not connect to the other ranks (", pending->error, "); ", impl.watch->never_arrived(0));
        }
        return pending->group;
      }
    }
    if (interrupted()) {
      impl.broken = true;
      ZEST_FAIL("stopped by a signal while connecting to the other ranks");
    }
    // A peer that joined and then died: its heartbeat stops; 5 s of silence is not a slow start.
    if (Clock::now() - start > std::chrono::seconds(5)) {
      const std::string silent = impl.watch->silent_peers(std::chrono::seconds(5));
      if (!silent.empty()) {
        impl.broken = true;
        ZEST_FAIL("Gloo: the ranks could not connect: ", silent);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

GlooCommunicator::GlooCommunicator(const WorldInfo& world) : world_(world), impl_(std::make_shared<Impl>()) {
  const WorldInfo& w = world_;
  ZEST_CHECK(w.size >= 1 && w.rank >= 0 && w.rank < w.size, "Gloo: rank ", w.rank, " outside world of size ", w.size);
  impl_->world = w;
  Rendezvous rendezvous = join_world(w);
  impl_->store = rendezvous.store;
  impl_->peers = rendezvous.peers;
  impl_->watch = std::make_unique<PeerWatch>(rendezvous, w.store_prefix, w.rank);
  const SocketChoice socket = choose_socket_interface(w.master_addr, rendezvous.peers, w.rank);
  if (w.local_rank == 0) {
    std::fprintf(stderr, "zest: [rank %d] Gloo sockets on %s (%s): %s%s\n", w.rank, socket.interface.c_str(),
                 socket.address.c_str(), socket.reason.c_str(),
                 socket.reason.find("IFNAME") == std::string::npos ? "; GLOO_SOCKET_IFNAME chooses another" : "");
    std::fflush(stderr);
  }
  // NCCL's bootstrap sockets go the same way unless the user said otherwise.
  if (socket.interface != "lo" && socket.interface != "?") ::setenv("NCCL_SOCKET_IFNAME", socket.interface.c_str(), 0);
  std::shared_ptr<::gloo::transport::Device> device;
  try {
    device = socket.reason == "GLOO_SOCKET_IFNAME" || socket.reason == "NCCL_SOCKET_IFNAME"
                 ? c10d::ProcessGroupGloo::createDeviceForInterface(socket.interface)
                 : c10d::ProcessGroupGloo::createDeviceForHostname(socket.address);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    ZEST_FAIL("Gloo: cannot open a socket on ", socket.interface, " (", socket.address, "): ",
              what.substr(0, what.find('\n')), "; set GLOO_SOCKET_IFNAME to an interface the other hosts reach");
  }
  impl_->group = connect_group(*impl_, std::move(device));
}

GlooCommunicator::~GlooCommunicator() {
  if (impl_ && impl_->broken) {
    // Its threads may be stuck in the failed collective: joining them would hang the exit.
    (void)impl_->group.release();
    (void)impl_->store.release();
    (void)impl_->watch.release();
  }
}

namespace {
// The Issue of a collective issued now: its number, the step and the caller's label (the bucket's units).
Issue issue_now(GlooCommunicator::Impl& impl, const char* op, const torch::Tensor& t) {
  return Issue{zest::str(op, " of ", t.numel(), " ", t.scalar_type(), " elements"), impl.watch->next_sequence(),
               collective_step(), CollectiveLabel::current()};
}
}  // namespace

WorkHandle GlooCommunicator::allreduce(const torch::Tensor& tensor, ReduceOp op) {
  check_gloo_operand(tensor, "allreduce");
  if (tensor.numel() == 0 || size() == 1) return std::make_unique<DoneWork>();
  const torch::Dtype compute = reduction_dtype(tensor.scalar_type());
  torch::Tensor buffer = compute == tensor.scalar_type() ? tensor : tensor.to(compute);
  std::vector<torch::Tensor> tensors{buffer.view({-1})};
  auto work = impl_->group->allreduce(tensors, allreduce_options(op));
  const double divisor = op == ReduceOp::avg ? size() : 1.0;
  std::function<void()> finish;
  if (!buffer.is_same(tensor) || divisor != 1.0) {
    finish = [tensor, buffer, divisor] {
      if (divisor != 1.0) buffer.div_(divisor);
      if (!buffer.is_same(tensor)) tensor.copy_(buffer);
    };
  }
  return std::make_unique<GlooWork>(impl_, std::move(work), issue_now(*impl_, "allreduce", tensor),
                                    std::vector<torch::Tensor>{tensor, buffer}, finish);
}

WorkHandle GlooCommunicator::reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                                            ReduceOp op) {
  check_gloo_operand(input, "reduce_scatter input");
  check_gloo_operand(output, "reduce_scatter output");
  const int64_t n = output.numel();
  ZEST_CHECK(input.numel() == n * size(), "reduce_scatter: input has ", input.numel(),
             " elements, expected world size ", size(), " x output ", n);
  if (n == 0) return std::make_unique<DoneWork>();
  // Reduce in the wider of the two dtypes (an fp32 output of bf16 gradients reduces in fp32), always
  // into a private copy: the input is read-only to the caller's eyes.
  torch::Dtype compute = reduction_dtype(output.scalar_type());
  if (reduction_dtype(input.scalar_type()) == torch::kFloat64) compute = torch::kFloat64;
  torch::Tensor full = input.reshape({-1}).to(compute, /*non_blocking=*/false, /*copy=*/true);
  std::vector<torch::Tensor> tensors{full};
  auto work = size() == 1 ? c10::intrusive_ptr<c10d::Work>() : impl_->group->allreduce(tensors, allreduce_options(op));
  const int64_t begin = rank() * n;
  const double divisor = op == ReduceOp::avg ? size() : 1.0;
  auto finish = [output, full, begin, n, divisor] {
    auto own = full.narrow(0, begin, n);
    if (divisor != 1.0) own.div_(divisor);
    output.copy_(own.view_as(output));
  };
  if (!work) {
    torch::NoGradGuard no_grad;
    finish();
    return std::make_unique<DoneWork>();
  }
  return std::make_unique<GlooWork>(impl_, std::move(work), issue_now(*impl_, "reduce_scatter", input),
                                    std::vector<torch::Tensor>{input, full, output}, finish);
}

WorkHandle GlooCommunicator::allgather(const torch::Tensor& input, const torch::Tensor& output) {
  check_gloo_operand(input, "allgather input");
  check_gloo_operand(output, "allgather output");
  ZEST_CHECK(input.scalar_type() == output.scalar_type(), "allgather: input dtype ", input.scalar_type(),
             " differs from output dtype ", output.scalar_type());
  const int64_t n = input.numel();
  ZEST_CHECK(output.numel() == n * size(), "allgather: output has ", output.numel(),
             " elements, expected world size ", size(), " x input ", n);
  const int64_t bytes = n * static_cast<int64_t>(input.element_size());
  const char* own_slot = static_cast<const char*>(output.data_ptr()) + rank() * bytes;
  const bool in_place = input.data_ptr() == own_slot;
  ZEST_CHECK(in_place || !overlaps(input, output), "allgather: input overlaps output but is not this rank's slot");
  if (n == 0) return std::make_unique<DoneWork>();
  if (size() == 1) {
    if (!in_place) output.view({-1}).copy_(input.view({-1}));
    return std::make_unique<DoneWork>();
  }
  // Gloo copies the input into its own buffer before sending, so an input aliasing its slot is safe.
  const torch::Tensor out_bytes = as_bytes(output);
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < size(); ++r) outputs[0].push_back(out_bytes.narrow(0, r * bytes, bytes));
  std::vector<torch::Tensor> inputs{as_bytes(input)};
  auto work = impl_->group->allgather(outputs, inputs);
  return std::make_unique<GlooWork>(impl_, std::move(work), issue_now(*impl_, "allgather", input),
                                    std::vector<torch::Tensor>{input, output}, nullptr);
}

WorkHandle GlooCommunicator::broadcast(const torch::Tensor& tensor, int root) {
  check_gloo_operand(tensor, "broadcast");
  ZEST_CHECK(root >= 0 && root < size(), "broadcast root ", root, " outside world of size ", size());
  if (tensor.numel() == 0 || size() == 1) return std::make_unique<DoneWork>();
  std::vector<torch::Tensor> tensors{as_bytes(tensor)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  auto work = impl_->group->broadcast(tensors, options);
  return std::make_unique<GlooWork>(impl_, std::move(work), issue_now(*impl_, "broadcast", tensor),
                                    std::vector<torch::Tensor>{tensor}, nullptr);
}

void GlooCommunicator::barrier() {
  if (size() == 1) return;
  GlooWork(impl_, impl_->group->barrier(), Issue{"barrier", impl_->watch->next_sequence(), collective_step(),
                                                 CollectiveLabel::current()},
           {}, nullptr)
      .wait();
}

#else  // !ZEST_HAS_GLOO

struct GlooCommunicator::Impl {};

GlooCommunicator::GlooCommunicator(const WorldInfo& world) : world_(world) {
  ZEST_FAIL("rank ", world.rank, " of ", world.size, " was started with a torchrun-style environment "
            "(RANK/WORLD_SIZE, e.g. by zest launch), but this zest was built without Gloo's headers (LibTorch "
            "2.x wheels omit them): rebuild with gloo/*.h on the include path (e.g. -DZEST_THIRD_PARTY=DIR "
            "with DIR/include/gloo from Debian's libgloo-dev) or start the ranks with mpirun");
}
GlooCommunicator::~GlooCommunicator() = default;
WorkHandle GlooCommunicator::allreduce(const torch::Tensor&, ReduceOp) { ZEST_FAIL("no Gloo in this build"); }
WorkHandle GlooCommunicator::reduce_scatter(const torch::Tensor&, const torch::Tensor&, ReduceOp) {
  ZEST_FAIL("no Gloo in this build");
}
WorkHandle GlooCommunicator::allgather(const torch::Tensor&, const torch::Tensor&) {
  ZEST_FAIL("no Gloo in this build");
}
WorkHandle GlooCommunicator::broadcast(const torch::Tensor&, int) { ZEST_FAIL("no Gloo in this build"); }
void GlooCommunicator::barrier() { ZEST_FAIL("no Gloo in this build"); }

#endif  // ZEST_HAS_GLOO

}  // namespace zest
