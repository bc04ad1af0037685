// In-process communicator for the checkpoint tests (see thread_world.h). Each collective is: post the
// input, rendezvous, compute the own result from everyone's inputs (fixed rank order, so results are
// deterministic), rendezvous, write the own output.
#include "thread_world.h"

#include "core/check.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace zest::testing {
namespace {

struct Shared {
  explicit Shared(int n) : size(n), inputs(n) {}
  const int size;
  std::vector<torch::Tensor> inputs;  // posted per collective
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  bool aborted = false;

  void rendezvous() {
    std::unique_lock<std::mutex> lock(mutex);
    ZEST_CHECK(!aborted, "thread world aborted (another rank failed)");
    const int64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    ZEST_CHECK(!aborted, "thread world aborted (another rank failed)");
  }
  void abort() {
    std::lock_guard<std::mutex> lock(mutex);
    aborted = true;
    cv.notify_all();
  }
};

torch::Dtype compute_dtype(torch::Dtype dtype) {
  return dtype == torch::kBFloat16 || dtype == torch::kFloat16 ? torch::kFloat32 : dtype;
}

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return shared_->size; }
  int local_rank() const override { return rank_; }
  int local_size() const override { return shared_->size; }
  std::string backend() const override { return "threads"; }

  WorkHandle allreduce(const torch::Tensor& tensor, ReduceOp op) override {
    const auto result = reduce(tensor, op, compute_dtype(tensor.scalar_type()), 0, tensor.numel());
    finish(tensor, result);
    return std::make_unique<DoneWork>();
  }
  WorkHandle reduce_scatter(const torch::Tensor& input, const torch::Tensor& output, ReduceOp op) override {
    const int64_t n = output.numel();
    ZEST_CHECK(input.numel() == n * size(), "reduce_scatter: input ", input.numel(), " != ", size(), " x ", n);
    torch::Dtype dtype = compute_dtype(output.scalar_type());
    if (input.scalar_type() == torch::kFloat64) dtype = torch::kFloat64;
    const auto result = reduce(input, op, dtype, rank_ * n, n);
    finish(output, result);
    return std::make_unique<DoneWork>();
  }
  WorkHandle allgather(const torch::Tensor& input, const torch::Tensor& output) override {
    const int64_t n = input.numel();
    ZEST_CHECK(output.numel() == n * size(), "allgather: output ", output.numel(), " != ", size(), " x ", n);
    post(input);
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < size(); ++r) parts.push_back(shared_->inputs[r].reshape({-1}).clone());
    finish(output, torch::cat(parts));
    return std::make_unique<DoneWork>();
  }
  WorkHandle broadcast(const torch::Tensor& tensor, int root) override {
    post(tensor);
    const auto value = shared_->inputs[root].clone();
    finish(tensor, value);
    return std::make_unique<DoneWork>();
  }
  void barrier() override { shared_->rendezvous(); }

 private:
  void post(const torch::Tensor& t) {
    shared_->inputs[rank_] = t;
    shared_->rendezvous();
  }
  torch::Tensor reduce(const torch::Tensor& input, ReduceOp op, torch::Dtype dtype, int64_t begin, int64_t n) {
    post(input);
    torch::NoGradGuard no_grad;
    torch::Tensor acc = shared_->inputs[0].reshape({-1}).narrow(0, begin, n).to(dtype, false, true);
    for (int r = 1; r < size(); ++r) {
      const auto part = shared_->inputs[r].reshape({-1}).narrow(0, begin, n).to(dtype);
      if (op == ReduceOp::sum) {
        acc.add_(part);
      } else {
        acc = torch::maximum(acc, part);
      }
    }
    return acc;
  }
  // Everyone has read the inputs before anyone overwrites its output (which may alias its input).
  void finish(const torch::Tensor& output, const torch::Tensor& value) {
    shared_->rendezvous();
    torch::NoGradGuard no_grad;
    output.copy_(value.view_as(output));
  }

  std::shared_ptr<Shared> shared_;
  int rank_;
};

}  // namespace

void run_ranks(int size, const std::function<void(int, std::shared_ptr<Communicator>)>& fn) {
  auto shared = std::make_shared<Shared>(size);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r, std::make_shared<ThreadCommunicator>(shared, r));
      } catch (...) {
        errors[r] = std::current_exception();
        shared->abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  // A rank's own error beats the "aborted" errors it caused elsewhere.
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      if (std::string(ex.what()).find("thread world aborted") == std::string::npos) throw;
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace zest::testing
