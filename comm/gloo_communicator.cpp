// Gloo collectives over CPU tensors through c10d's TCPStore (rendezvous) and ProcessGroupGloo
// (transport). Each operation returns a GlooWork that owns the c10d work, the tensors it touches and
// the copy-back from any staging buffer; a failed or timed-out collective names the operation.
#include "comm/gloo_communicator.h"

#include "core/check.h"

#include <algorithm>
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
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#else
#define ZEST_HAS_GLOO 0
#endif

namespace zest {

std::chrono::seconds comm_timeout_from_env() {
  const char* value = std::getenv("ZEST_COMM_TIMEOUT_S");
  if (value == nullptr || *value == '\0') return std::chrono::seconds(300);
  char* end = nullptr;
  const long seconds = std::strtol(value, &end, 10);
  ZEST_CHECK(end != value && *end == '\0' && seconds > 0, "environment variable ZEST_COMM_TIMEOUT_S='",
             value, "' must be a positive number of seconds");
  return std::chrono::seconds(seconds);
}

#if ZEST_HAS_GLOO

struct GlooCommunicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
};

namespace {

class GlooWork final : public Work {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::vector<torch::Tensor> keep_alive,
           std::function<void()> finish)
      : work_(std::move(work)), what_(std::move(what)), keep_alive_(std::move(keep_alive)),
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
    try {
      work_->wait();
    } catch (const std::exception& e) {
      ZEST_FAIL("Gloo ", what_, " failed: ", e.what(), " (a peer rank exited, stalled longer than the "
                "collective timeout ZEST_COMM_TIMEOUT_S, or ran different collectives)");
    }
    if (finish_) {
      torch::NoGradGuard no_grad;
      finish_();
    }
    keep_alive_.clear();
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::vector<torch::Tensor> keep_alive_;
  std::function<void()> finish_;
  bool done_ = false;
};

bool is_half_float(torch::Dtype dtype) { return dtype == torch::kBFloat16 || dtype == torch::kFloat16; }

// The dtype a reduction is computed in: 16-bit floats go through fp32 (as in MpiCommunicator).
torch::Dtype reduction_dtype(torch::Dtype dtype) { return is_half_float(dtype) ? torch::kFloat32 : dtype; }

c10d::AllreduceOptions allreduce_options(ReduceOp op) {
  c10d::AllreduceOptions options;
  // avg: a sum, divided by the world size once it has arrived.
  options.reduceOp = op == ReduceOp::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  return options;
}

void check_cpu_contiguous(const torch::Tensor& t, const char* what) {
  ZEST_CHECK(t.device().is_cpu(), what, ": Gloo communicator needs CPU tensors, got ", t.device());
  ZEST_CHECK(t.is_contiguous(), what, ": tensor must be contiguous");
}

// Data movement (broadcast, allgather) is dtype-blind: send every dtype as bytes, so bf16 and bool
// need no Gloo support.
torch::Tensor as_bytes(const torch::Tensor& t) { return t.reshape({-1}).view(torch::kUInt8); }

bool overlaps(const torch::Tensor& a, const torch::Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// GLOO_SOCKET_IFNAME picks the interface (as in PyTorch); a loopback master means a one-host job, so
// bind to loopback; otherwise the address this host's name resolves to.
std::shared_ptr<::gloo::transport::Device> make_device(const GlooOptions& o) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (is_loopback(o.master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

std::string describe(const char* op, const torch::Tensor& t, const GlooOptions& o) {
  return zest::str(op, " of ", t.numel(), " ", t.scalar_type(), " elements on rank ", o.rank, " (timeout ",
                   o.timeout.count(), " s)");
}

// Gloo uses one timeout for connecting and for collectives. Ranks may start minutes apart but
// collectives should fail fast, so every rank first checks in at the store (patiently) and only then
// connects, all at about the same time, under the collective timeout.
void wait_for_all_ranks(c10d::Store& store, const GlooOptions& o, std::chrono::milliseconds timeout,
                        const std::string& where) {
  std::vector<std::string> keys;
  for (int r = 0; r < o.size; ++r) keys.push_back("zest/joined/" + std::to_string(r));
  try {
    store.set(keys[static_cast<size_t>(o.rank)], std::vector<uint8_t>{1});
    store.wait(keys, timeout);
  } catch (const std::exception& e) {
    ZEST_FAIL("Gloo rendezvous: rank ", o.rank, " waited ", timeout.count() / 1000, " s at the store at ", where,
              " for all ", o.size, " ranks to start: ", e.what());
  }
}

}  // namespace

GlooCommunicator::GlooCommunicator(const GlooOptions& options)
    : options_(options), impl_(std::make_unique<Impl>()) {
  const GlooOptions& o = options_;
  ZEST_CHECK(o.size >= 1 && o.rank >= 0 && o.rank < o.size, "Gloo: rank ", o.rank, " outside world of size ",
             o.size);
  ZEST_CHECK(o.master_port > 0 && o.master_port < 65536, "Gloo: MASTER_PORT ", o.master_port,
             " is not a TCP port");
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout);
  const auto rendezvous_timeout = std::max<std::chrono::milliseconds>(timeout, std::chrono::seconds(300));
  const std::string where = zest::str(o.master_addr, ":", o.master_port);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(o.master_port);
    store_options.isServer = o.rank == 0;
    store_options.numWorkers = static_cast<size_t>(o.size);
    store_options.waitWorkers = true;
    store_options.timeout = rendezvous_timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, store_options);
  } catch (const std::exception& e) {
    ZEST_FAIL("Gloo rendezvous: rank ", o.rank, " of ", o.size, " could not ",
              o.rank == 0 ? "host" : "reach", " the store at ", where, " within ",
              rendezvous_timeout.count() / 1000, " s: ", e.what());
  }
  wait_for_all_ranks(*impl_->store, o, rendezvous_timeout, where);
  try {
    auto group_options = c10d::ProcessGroupGloo::Options::create(timeout);
    group_options->devices.push_back(make_device(o));
    impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, o.rank, o.size, group_options);
  } catch (const std::exception& e) {
    ZEST_FAIL("Gloo: rank ", o.rank, " of ", o.size, " could not connect to its peers (store at ", where,
              ", timeout ", o.timeout.count(), " s): ", e.what());
  }
}

GlooCommunicator::~GlooCommunicator() = default;

WorkHandle GlooCommunicator::allreduce(const torch::Tensor& tensor, ReduceOp op) {
  check_cpu_contiguous(tensor, "allreduce");
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
  return std::make_unique<GlooWork>(std::move(work), describe("allreduce", tensor, options_),
                                    std::vector<torch::Tensor>{tensor, buffer}, finish);
}

WorkHandle GlooCommunicator::reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                                            ReduceOp op) {
  check_cpu_contiguous(input, "reduce_scatter input");
  check_cpu_contiguous(output, "reduce_scatter output");
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
  return std::make_unique<GlooWork>(std::move(work), describe("reduce_scatter", input, options_),
                                    std::vector<torch::Tensor>{input, full, output}, finish);
}

WorkHandle GlooCommunicator::allgather(const torch::Tensor& input, const torch::Tensor& output) {
  check_cpu_contiguous(input, "allgather input");
  check_cpu_contiguous(output, "allgather output");
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
  return std::make_unique<GlooWork>(std::move(work), describe("allgather", input, options_),
                                    std::vector<torch::Tensor>{input, output}, nullptr);
}

WorkHandle GlooCommunicator::broadcast(const torch::Tensor& tensor, int root) {
  check_cpu_contiguous(tensor, "broadcast");
  ZEST_CHECK(root >= 0 && root < size(), "broadcast root ", root, " outside world of size ", size());
  if (tensor.numel() == 0 || size() == 1) return std::make_unique<DoneWork>();
  std::vector<torch::Tensor> tensors{as_bytes(tensor)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  auto work = impl_->group->broadcast(tensors, options);
  return std::make_unique<GlooWork>(std::move(work), describe("broadcast", tensor, options_),
                                    std::vector<torch::Tensor>{tensor}, nullptr);
}

void GlooCommunicator::barrier() {
  if (size() == 1) return;
  const std::string what = zest::str("barrier on rank ", rank(), " (timeout ", options_.timeout.count(), " s)");
  GlooWork(impl_->group->barrier(), what, {}, nullptr).wait();
}

#else  // !ZEST_HAS_GLOO

struct GlooCommunicator::Impl {};

GlooCommunicator::GlooCommunicator(const GlooOptions& options) : options_(options) {
  ZEST_FAIL("rank ", options.rank, " of ", options.size, " was started with a torchrun-style environment "
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
