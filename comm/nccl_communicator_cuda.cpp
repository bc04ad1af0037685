// NcclCommunicator: collectives over CUDA tensors with NCCL called directly (not through c10d's
// ProcessGroupNCCL: zest needs its own streams, in-place and grouped calls over flat buffers, and a
// watchdog that names the bucket and the step, the same on LibTorch 1.13 and 2.11 — c10d's NCCL API
// differs between them). Two channels, each its own NCCL communicator on its own stream: "reduce" for
// gradient reductions and norms, "gather" for parameter gathers, so a stage-3 prefetch overlaps a
// reduce-scatter. Every call is ordered after the work already queued on the caller's stream with an
// event, and waiting on its handle makes the caller's stream wait — the host never blocks. CPU tensors
// (checkpoint coordination, agreement) go to the control communicator (MPI or Gloo), which also carried
// the NCCL unique ids.
#include "comm/collective_timeout.h"
#include "comm/exposure.h"
#include "comm/communicator.h"
#include "core/check.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

// ZEST_NCCL_CHECK(ncclCall(...)): a failed NCCL call throws zest::Error with NCCL's text.
#define ZEST_NCCL_CHECK(call)                                                                          \
  do {                                                                                                 \
    const ncclResult_t zest_nccl_rc_ = (call);                                                         \
    if (zest_nccl_rc_ != ncclSuccess && zest_nccl_rc_ != ncclInProgress) {                             \
      ::zest::detail::fail(__FILE__, __LINE__, #call, "NCCL error: ", ncclGetErrorString(zest_nccl_rc_), \
                           " (", ncclGetLastError(nullptr), ")");                                      \
    }                                                                                                  \
  } while (0)

namespace zest {
namespace {

ncclDataType_t nccl_dtype(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return ncclFloat32;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kFloat16: return ncclFloat16;
    case torch::kFloat64: return ncclFloat64;
    case torch::kInt64: return ncclInt64;
    case torch::kInt32: return ncclInt32;
    case torch::kUInt8: return ncclUint8;
    case torch::kBool: return ncclUint8;
    default: ZEST_FAIL("NCCL: dtype ", dtype, " is not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::avg: return ncclAvg;
  }
  return ncclSum;
}

void check_cuda_contiguous(const torch::Tensor& t, const char* what) {
  ZEST_CHECK(t.is_cuda() && t.is_contiguous(), what, ": NCCL needs contiguous CUDA tensors, got ", t.device(),
             t.is_contiguous() ? "" : " (not contiguous)");
}

// One NCCL communicator with the stream its collectives run on.
struct Channel {
  const char* name = "";
  ncclComm_t comm = nullptr;
  c10::cuda::CUDAStream stream;
  explicit Channel(const char* channel_name, c10::cuda::CUDAStream s) : name(channel_name), stream(s) {}
};

// A collective in flight, as the watchdog sees it.
struct Issued {
  std::shared_ptr<at::cuda::CUDAEvent> done;  // null while its NCCL calls are still being issued
  std::string what;
  int64_t sequence = 0;
  int64_t step = 0;
  std::chrono::steady_clock::time_point issued_at;
};

// The current stream is being captured into a CUDA graph (engine/step_graphs.h): its collectives run
// at each replay, where no host code follows them, so the watchdog does not track them.
bool is_capturing() {
  return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
}

// Keeps the tensors the collective reads and writes alive until the caller's stream is ordered after it
// (wait); the caller may then drop them and the caching allocator reuses the memory in that stream's
// order, with no record_stream holding it longer (a gradient bucket is free again as soon as its
// reduction is waited for). A handle dropped without a wait hands the tensors over to the channel's
// stream instead.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<at::cuda::CUDAEvent> done, std::vector<torch::Tensor> keep_alive,
           c10::cuda::CUDAStream stream)
      : done_(std::move(done)), keep_alive_(std::move(keep_alive)), stream_(stream) {}
  ~NcclWork() override {
    if (!done_) return;
    for (const auto& t : keep_alive_) t.record_stream(stream_);
  }
  void order_before_current_stream() override {
    if (done_) done_->block(c10::cuda::getCurrentCUDAStream());
  }
  void wait() override {
    if (!done_) return;
    const auto stream = c10::cuda::getCurrentCUDAStream();
    if (!is_exposure_timing() || is_capturing()) {  // a captured wait has no host-side timing
      done_->block(stream);  // the caller's stream waits; the host does not
      done_.reset();
      keep_alive_.clear();
      return;
    }
    // Exposure: how long the stream is held here (0 when the collective finished before the stream got
    // to this point).
    auto before = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    auto after = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    before->record(stream);
    done_->block(stream);
    after->record(stream);
    add_device_wait([before, after] {
      after->synchronize();
      return static_cast<double>(before->elapsed_time(*after));
    });
    done_.reset();
    keep_alive_.clear();
  }

 private:
  std::shared_ptr<at::cuda::CUDAEvent> done_;
  std::vector<torch::Tensor> keep_alive_;
  c10::cuda::CUDAStream stream_;
};

std::string host_name() {
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> control, const torch::Device& device);
  ~NcclCommunicator() override;

  int rank() const override { return control_->rank(); }
  int size() const override { return control_->size(); }
  int local_rank() const override { return control_->local_rank(); }
  int local_size() const override { return control_->local_size(); }
  std::string backend() const override { return "nccl"; }

  WorkHandle allreduce(const torch::Tensor& tensor, ReduceOp op) override;
  WorkHandle reduce_scatter(const torch::Tensor& input, const torch::Tensor& output, ReduceOp op) override;
  WorkHandle allgather(const torch::Tensor& input, const torch::Tensor& output) override;
  WorkHandle broadcast(const torch::Tensor& tensor, int root) override;
  void barrier() override { control_->barrier(); }
  WorkHandle reduce_scatter_many(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& outputs,
                                 ReduceOp op, bool accumulate) override;
  WorkHandle allgather_many(const std::vector<torch::Tensor>& inputs,
                            const std::vector<torch::Tensor>& outputs) override;
  WorkHandle allreduce_many(const std::vector<torch::Tensor>& tensors, ReduceOp op) override;

 private:
  void init_channel(Channel& channel);
  void start_progress_board();
  // Queues `body` (NCCL calls on channel.stream) after the caller's queued work; returns its handle.
  template <typename Body>
  WorkHandle launch(Channel& channel, const char* op, const std::vector<torch::Tensor>& touched, Body&& body);
  void watchdog_loop();
  [[noreturn]] void report_timeout(const Issued& late);
  [[noreturn]] void abort_and_exit();
  std::string ranks_behind(int64_t sequence);

  std::shared_ptr<Communicator> control_;
  torch::Device device_;
  Channel reduce_;
  Channel gather_;

  // Watchdog: collectives in flight (oldest first) and each rank's progress published in a TCP store.
  c10::intrusive_ptr<c10d::TCPStore> board_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Issued> in_flight_;
  std::atomic<int64_t> issued_{0};
  std::atomic<bool> stopping_{false};
  std::thread watchdog_;
};

NcclCommunicator::NcclCommunicator(std::shared_ptr<Communicator> control, const torch::Device& device)
    : control_(std::move(control)),
      device_(device),
      reduce_("reduce", c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index())),
      gather_("gather", c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index())) {
  // NVLink SHARP (multicast) can take a shared machine's GPUs down; keep it off unless asked for.
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  const c10::cuda::CUDAGuard guard(device_);
  init_channel(reduce_);
  init_channel(gather_);
  start_progress_board();
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

NcclCommunicator::~NcclCommunicator() {
  stopping_ = true;
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  for (Channel* channel : {&reduce_, &gather_}) {
    if (channel->comm != nullptr) ncclCommDestroy(channel->comm);
  }
}

// Rank 0 makes the unique id; the control communicator carries it to every rank.
void NcclCommunicator::init_channel(Channel& channel) {
  ncclUniqueId id;
  if (rank() == 0) ZEST_NCCL_CHECK(ncclGetUniqueId(&id));
  auto bytes = torch::zeros({static_cast<int64_t>(sizeof(id))}, torch::kUInt8);
  if (rank() == 0) std::memcpy(bytes.data_ptr(), &id, sizeof(id));
  control_->broadcast_sync(bytes, 0);
  std::memcpy(&id, bytes.data_ptr(), sizeof(id));
  ZEST_NCCL_CHECK(ncclCommInitRank(&channel.comm, size(), id, rank()));
}

// A small TCP store hosted by rank 0 where each rank's watchdog publishes how many collectives it has
// issued: on a timeout, the ranks that never issued the late collective are the ones named.
void NcclCommunicator::start_progress_board() {
  std::string address;
  if (rank() == 0) {
    c10d::TCPStoreOptions options;
    options.port = 0;  // any free port
    options.isServer = true;
    options.numWorkers = size();
    options.waitWorkers = false;
    options.timeout = std::chrono::seconds(10);  // diagnostics only: never block the watchdog for long
    board_ = c10::make_intrusive<c10d::TCPStore>("0.0.0.0", options);
    const char* master = std::getenv("MASTER_ADDR");
    address = str(master && *master ? master : host_name().c_str(), ":", board_->getPort());
  }
  address = control_->broadcast_string(address, 0);
  if (rank() != 0) {
    const auto colon = address.rfind(':');
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(std::stoi(address.substr(colon + 1)));
    options.isServer = false;
    options.timeout = std::chrono::seconds(10);
    board_ = c10::make_intrusive<c10d::TCPStore>(address.substr(0, colon), options);
  }
}

template <typename Body>
WorkHandle NcclCommunicator::launch(Channel& channel, const char* op, const std::vector<torch::Tensor>& touched,
                                    Body&& body) {
  const c10::cuda::CUDAGuard device_guard(device_);
  const bool tracked = !is_capturing();
  // Registered before the NCCL calls: a call can itself block the host (the first collective on a
  // communicator connects to its peers), and the watchdog must see that too.
  const int64_t sequence = tracked ? issued_.fetch_add(1) + 1 : 0;
  if (tracked) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_.push_back({nullptr,
                          str(op, " on the ", channel.name, " channel", CollectiveLabel::current().empty() ? "" : " (",
                              CollectiveLabel::current(), CollectiveLabel::current().empty() ? "" : ")"),
                          sequence, collective_step(), std::chrono::steady_clock::now()});
  }
  at::cuda::CUDAEvent ready;
  ready.record(c10::cuda::getCurrentCUDAStream(device_.index()));
  ready.block(channel.stream);
  {
    const c10::cuda::CUDAStreamGuard stream_guard(channel.stream);
    body();  // its temporaries are allocated on, and reused in the order of, the channel's stream
  }
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  done->record(channel.stream);
  if (tracked) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = in_flight_.rbegin(); it != in_flight_.rend(); ++it) {
      if (it->sequence == sequence) {
        it->done = done;
        break;
      }
    }
  }
  return std::make_unique<NcclWork>(std::move(done), touched, channel.stream);
}

WorkHandle NcclCommunicator::allreduce(const torch::Tensor& tensor, ReduceOp op) {
  if (!tensor.is_cuda()) return control_->allreduce(tensor, op);
  return allreduce_many({tensor}, op);
}

WorkHandle NcclCommunicator::allreduce_many(const std::vector<torch::Tensor>& tensors, ReduceOp op) {
  ZEST_CHECK(!tensors.empty(), "allreduce_many: no tensors");
  if (!tensors.front().is_cuda()) return Communicator::allreduce_many(tensors, op);
  for (const auto& t : tensors) check_cuda_contiguous(t, "allreduce");
  return launch(reduce_, "allreduce", tensors, [&] {
    ZEST_NCCL_CHECK(ncclGroupStart());
    for (const auto& t : tensors) {
      ZEST_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_dtype(t.scalar_type()), nccl_op(op),
                                    reduce_.comm, reduce_.stream.stream()));
    }
    ZEST_NCCL_CHECK(ncclGroupEnd());
  });
}

WorkHandle NcclCommunicator::reduce_scatter(const torch::Tensor& input, const torch::Tensor& output, ReduceOp op) {
  if (!input.is_cuda()) return control_->reduce_scatter(input, output, op);
  return reduce_scatter_many({input}, {output}, op, /*accumulate=*/false);
}

WorkHandle NcclCommunicator::reduce_scatter_many(const std::vector<torch::Tensor>& inputs,
                                                 const std::vector<torch::Tensor>& outputs, ReduceOp op,
                                                 bool accumulate) {
  ZEST_CHECK(!inputs.empty() && inputs.size() == outputs.size(), "reduce_scatter_many: ", inputs.size(),
             " inputs for ", outputs.size(), " outputs");
  if (!inputs.front().is_cuda()) return Communicator::reduce_scatter_many(inputs, outputs, op, accumulate);
  std::vector<torch::Tensor> touched;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cuda_contiguous(inputs[i], "reduce_scatter input");
    check_cuda_contiguous(outputs[i], "reduce_scatter output");
    ZEST_CHECK(inputs[i].numel() == outputs[i].numel() * size(), "reduce_scatter: input has ", inputs[i].numel(),
               " elements, expected world size ", size(), " x output ", outputs[i].numel());
    touched.push_back(inputs[i]);
    touched.push_back(outputs[i]);
  }
  return launch(reduce_, accumulate ? "reduce_scatter (accumulating)" : "reduce_scatter", touched, [&] {
    // On the channel's stream: inputs cast to the output dtype where they differ, results that
    // accumulate land in temporaries first.
    std::vector<torch::Tensor> sends, recvs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto dtype = outputs[i].scalar_type();
      sends.push_back(inputs[i].scalar_type() == dtype ? inputs[i] : inputs[i].to(dtype));
      recvs.push_back(accumulate ? torch::empty_like(outputs[i]) : outputs[i]);
    }
    ZEST_NCCL_CHECK(ncclGroupStart());
    for (size_t i = 0; i < inputs.size(); ++i) {
      ZEST_NCCL_CHECK(ncclReduceScatter(sends[i].data_ptr(), recvs[i].data_ptr(), recvs[i].numel(),
                                        nccl_dtype(recvs[i].scalar_type()), nccl_op(op), reduce_.comm,
                                        reduce_.stream.stream()));
    }
    ZEST_NCCL_CHECK(ncclGroupEnd());
    if (accumulate) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < outputs.size(); ++i) outputs[i].add_(recvs[i]);
    }
  });
}

WorkHandle NcclCommunicator::allgather(const torch::Tensor& input, const torch::Tensor& output) {
  if (!input.is_cuda()) return control_->allgather(input, output);
  return allgather_many({input}, {output});
}

WorkHandle NcclCommunicator::allgather_many(const std::vector<torch::Tensor>& inputs,
                                            const std::vector<torch::Tensor>& outputs) {
  ZEST_CHECK(!inputs.empty() && inputs.size() == outputs.size(), "allgather_many: ", inputs.size(), " inputs for ",
             outputs.size(), " outputs");
  if (!inputs.front().is_cuda()) return Communicator::allgather_many(inputs, outputs);
  std::vector<torch::Tensor> touched;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cuda_contiguous(inputs[i], "allgather input");
    check_cuda_contiguous(outputs[i], "allgather output");
    ZEST_CHECK(inputs[i].scalar_type() == outputs[i].scalar_type() && outputs[i].numel() == inputs[i].numel() * size(),
               "allgather: output must be world size x input of the same dtype");
    touched.push_back(inputs[i]);
    touched.push_back(outputs[i]);
  }
  return launch(gather_, "allgather", touched, [&] {
    ZEST_NCCL_CHECK(ncclGroupStart());
    for (size_t i = 0; i < inputs.size(); ++i) {
      // In place when the input is this rank's slot of the output (NCCL allows it).
      ZEST_NCCL_CHECK(ncclAllGather(inputs[i].data_ptr(), outputs[i].data_ptr(), inputs[i].numel(),
                                    nccl_dtype(inputs[i].scalar_type()), gather_.comm, gather_.stream.stream()));
    }
    ZEST_NCCL_CHECK(ncclGroupEnd());
  });
}

WorkHandle NcclCommunicator::broadcast(const torch::Tensor& tensor, int root) {
  if (!tensor.is_cuda()) return control_->broadcast(tensor, root);
  check_cuda_contiguous(tensor, "broadcast");
  return launch(gather_, "broadcast", {tensor}, [&] {
    ZEST_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                  nccl_dtype(tensor.scalar_type()), root, gather_.comm, gather_.stream.stream()));
  });
}

// ---- the watchdog -----------------------------------------------------------------------------------

void NcclCommunicator::watchdog_loop() {
  const std::string my_key = "zest/issued/" + std::to_string(rank());
  auto last_publish = std::chrono::steady_clock::now() - std::chrono::hours(1);
  while (!stopping_) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_.load(); });
      // An entry without its event is still inside its NCCL calls on the host.
      while (!in_flight_.empty() && in_flight_.front().done && in_flight_.front().done->query()) in_flight_.pop_front();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_publish > std::chrono::seconds(1)) {
      try {
        const std::string count = std::to_string(issued_.load());
        board_->set(my_key, std::vector<uint8_t>(count.begin(), count.end()));
      } catch (...) {  // the board is diagnostics only
      }
      last_publish = now;
    }
    for (ncclComm_t comm : {reduce_.comm, gather_.comm}) {
      ncclResult_t async_error = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &async_error) == ncclSuccess && async_error != ncclSuccess &&
          async_error != ncclInProgress) {
        std::fprintf(stderr, "zest: error: [rank %d] NCCL failed asynchronously: %s (%s); ending this rank\n",
                     rank(), ncclGetErrorString(async_error), ncclGetLastError(comm));
        std::fflush(stderr);
        abort_and_exit();
      }
    }
    Issued oldest;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (in_flight_.empty()) continue;
      oldest = in_flight_.front();
    }
    if (now - oldest.issued_at > collective_timeout()) report_timeout(oldest);
  }
}

std::string NcclCommunicator::ranks_behind(int64_t sequence) {
  std::string behind;
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    try {
      const std::string key = "zest/issued/" + std::to_string(r);
      if (!board_->check({key})) {  // never published: get() would wait for it
        behind += str(behind.empty() ? "" : ", ", r, " (no report)");
        continue;
      }
      const auto value = board_->get(key);
      const int64_t issued = std::stoll(std::string(value.begin(), value.end()));
      if (issued < sequence) behind += str(behind.empty() ? "" : ", ", r, " (issued ", issued, ")");
    } catch (...) {
      behind += str(behind.empty() ? "" : ", ", r, " (no report)");
    }
  }
  return behind;
}

void NcclCommunicator::report_timeout(const Issued& late) {
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - late.issued_at).count();
  std::fprintf(stderr,
               "zest: error: [rank %d] NCCL %s, collective #%lld at step %lld, has not completed after %.1f s "
               "(engine.collective_timeout_s = %.1f). Ending this rank.\n",
               rank(), late.what.c_str(), static_cast<long long>(late.sequence), static_cast<long long>(late.step),
               waited, collective_timeout().count() / 1000.0);
  std::fflush(stderr);
  // Who is behind comes from the progress board, asked with a bound: the error above is out already.
  auto behind = std::make_shared<std::string>();
  auto asked = std::make_shared<std::atomic<bool>>(false);
  std::thread([this, behind, asked, sequence = late.sequence] {
    *behind = ranks_behind(sequence);
    *asked = true;
  }).detach();
  for (int i = 0; i < 40 && !*asked; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::fprintf(stderr, "zest: error: [rank %d] %s\n", rank(),
               !*asked         ? "the other ranks' progress could not be read"
               : behind->empty() ? "every rank issued it: a rank is stuck inside it or the network failed"
                                 : ("rank(s) that did not arrive: " + *behind).c_str());
  std::fflush(stderr);
  abort_and_exit();
}

// Aborts the NCCL communicators (peers blocked in them fail fast) and ends the process; an abort that
// itself hangs on a stuck kernel does not keep the process alive past a few seconds.
void NcclCommunicator::abort_and_exit() {
  std::thread([this] {
    ncclCommAbort(reduce_.comm);
    ncclCommAbort(gather_.comm);
    std::_Exit(1);
  }).detach();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  std::_Exit(1);
}

std::shared_ptr<Communicator> make_nccl_communicator(const std::shared_ptr<Communicator>& control,
                                                     const torch::Device& device) {
  return std::make_shared<NcclCommunicator>(control, device);
}

}  // namespace zest
