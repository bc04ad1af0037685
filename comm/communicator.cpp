// Communicator conveniences shared by every backend, built on the virtual collectives: control
// messages, and the grouped collectives as one packed collective (the CPU backends' implementation).
#include "comm/communicator.h"

#include "core/check.h"

#include <cstring>

namespace zest {

ThenWork::ThenWork(WorkHandle inner, std::function<void()> then, std::vector<torch::Tensor> keep_alive)
    : inner_(std::move(inner)), then_(std::move(then)), keep_alive_(std::move(keep_alive)) {}

ThenWork::~ThenWork() {
  if (done_) return;
  try {
    wait();
  } catch (...) {  // never throw from a destructor; a failed collective is reported by its waiter
  }
}

void ThenWork::wait() {
  if (done_) return;
  done_ = true;
  inner_->wait();
  if (then_) {
    torch::NoGradGuard no_grad;
    then_();
  }
  keep_alive_.clear();
}

std::string Communicator::broadcast_string(const std::string& value, int root) {
  auto length = torch::tensor({static_cast<int64_t>(value.size())}, torch::kInt64);
  broadcast_sync(length, root);
  auto bytes = torch::empty({length.item<int64_t>()}, torch::kUInt8);
  if (rank() == root && !value.empty()) std::memcpy(bytes.data_ptr(), value.data(), value.size());
  broadcast_sync(bytes, root);
  return std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel());
}

bool Communicator::any(bool flag) {
  auto t = torch::tensor({flag ? 1.0 : 0.0}, torch::kFloat64);
  allreduce_sync(t, ReduceOp::max);
  return t.item<double>() > 0.0;
}

namespace {

void check_pairs(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& outputs,
                 const char* what) {
  ZEST_CHECK(!inputs.empty() && inputs.size() == outputs.size(), what, ": ", inputs.size(), " inputs for ",
             outputs.size(), " outputs");
}

// Rows of `pieces` (each [world·n_i]) interleaved rank-major: world rows of [piece 0's slice r | ...].
torch::Tensor pack_rank_major(const std::vector<torch::Tensor>& pieces, int world, torch::Dtype dtype) {
  int64_t row = 0;
  for (const auto& p : pieces) row += p.numel() / world;
  auto packed = torch::empty({world, row}, pieces.front().options().dtype(dtype));
  int64_t col = 0;
  for (const auto& p : pieces) {
    const int64_t n = p.numel() / world;
    packed.narrow(1, col, n).copy_(p.view({world, n}));
    col += n;
  }
  return packed;
}

}  // namespace

WorkHandle Communicator::reduce_scatter_many(const std::vector<torch::Tensor>& inputs,
                                             const std::vector<torch::Tensor>& outputs, ReduceOp op,
                                             bool accumulate) {
  check_pairs(inputs, outputs, "reduce_scatter_many");
  torch::NoGradGuard no_grad;
  const int world = size();
  if (inputs.size() == 1 && !accumulate) return reduce_scatter(inputs[0], outputs[0], op);
  // One collective over the packed pieces; each output then takes (or adds) its columns.
  const torch::Dtype dtype = outputs.front().scalar_type();
  auto packed = pack_rank_major(inputs, world, inputs.front().scalar_type());
  int64_t row = packed.size(1);
  auto reduced = torch::empty({row}, packed.options().dtype(dtype));
  auto work = reduce_scatter(packed.view({-1}), reduced, op);
  auto then = [outputs, reduced, accumulate] {
    int64_t col = 0;
    for (const auto& out : outputs) {
      const auto piece = reduced.narrow(0, col, out.numel()).view_as(out);
      accumulate ? out.add_(piece) : out.copy_(piece);
      col += out.numel();
    }
  };
  return std::make_unique<ThenWork>(std::move(work), then, std::vector<torch::Tensor>{packed, reduced});
}

WorkHandle Communicator::allgather_many(const std::vector<torch::Tensor>& inputs,
                                        const std::vector<torch::Tensor>& outputs) {
  check_pairs(inputs, outputs, "allgather_many");
  torch::NoGradGuard no_grad;
  if (inputs.size() == 1) return allgather(inputs[0], outputs[0]);
  const int world = size();
  int64_t row = 0;
  for (const auto& in : inputs) row += in.numel();
  auto packed = torch::empty({world, row}, inputs.front().options());
  int64_t col = 0;
  for (const auto& in : inputs) {
    packed[rank()].narrow(0, col, in.numel()).copy_(in.view({-1}));
    col += in.numel();
  }
  auto work = allgather(packed[rank()], packed.view({-1}));
  auto then = [outputs, packed, world] {
    int64_t c = 0;
    for (const auto& out : outputs) {
      const int64_t n = out.numel() / world;
      out.view({world, n}).copy_(packed.narrow(1, c, n));
      c += n;
    }
  };
  return std::make_unique<ThenWork>(std::move(work), then, std::vector<torch::Tensor>{packed});
}

WorkHandle Communicator::allreduce_many(const std::vector<torch::Tensor>& tensors, ReduceOp op) {
  ZEST_CHECK(!tensors.empty(), "allreduce_many: no tensors");
  torch::NoGradGuard no_grad;
  if (tensors.size() == 1) return allreduce(tensors[0], op);
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.view({-1}));
  auto packed = torch::cat(flat);
  auto work = allreduce(packed, op);
  auto then = [tensors, packed] {
    int64_t offset = 0;
    for (const auto& t : tensors) {
      t.view({-1}).copy_(packed.narrow(0, offset, t.numel()));
      offset += t.numel();
    }
  };
  return std::make_unique<ThenWork>(std::move(work), then, std::vector<torch::Tensor>{packed});
}

}  // namespace zest
