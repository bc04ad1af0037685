// Error agreement and small gathers over a Communicator (see rank_agreement.h).
#include "checkpoint/rank_agreement.h"

#include "core/check.h"
#include "core/compat.h"

#include <cstring>

namespace zest::checkpoint {

void raise_if_any(Communicator& comm, const std::string& local_error) {
  // max over ranks of (size - rank) for failing ranks picks the lowest failing rank.
  auto flag = torch::tensor({local_error.empty() ? 0.0 : static_cast<double>(comm.size() - comm.rank())},
                            torch::kFloat64);
  comm.allreduce_sync(flag, ReduceOp::max);
  const auto code = static_cast<int>(flag.item<double>());
  if (code == 0) return;
  const int root = comm.size() - code;
  const std::string message = comm.broadcast_string(local_error, root);
  if (comm.rank() == root) throw Error(message);
  throw Error("rank " + std::to_string(root) + " failed: " + message);
}

std::string capture_error(const std::function<void()>& fn) {
  try {
    fn();
    return "";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    return message.empty() ? "unknown error" : message;
  }
}

std::vector<int64_t> allgather_int64(Communicator& comm, const std::vector<int64_t>& mine) {
  const auto n = static_cast<int64_t>(mine.size());
  auto input = torch::tensor(mine, torch::kInt64);
  auto output = torch::empty({n * comm.size()}, torch::kInt64);
  comm.allgather(input.reshape({n}), output)->wait();
  const auto* data = output.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + output.numel());
}

std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine) {
  const auto lengths = allgather_int64(comm, {static_cast<int64_t>(mine.size())});
  int64_t longest = 1;
  for (const int64_t n : lengths) longest = std::max(longest, n);
  auto input = torch::zeros({longest}, torch::kUInt8);
  if (!mine.empty()) std::memcpy(compat::mutable_data(input), mine.data(), mine.size());
  auto output = torch::empty({longest * comm.size()}, torch::kUInt8);
  comm.allgather(input, output)->wait();
  std::vector<std::string> out;
  const auto* bytes = static_cast<const char*>(compat::const_data(output));
  for (int r = 0; r < comm.size(); ++r) out.emplace_back(bytes + r * longest, static_cast<size_t>(lengths[r]));
  return out;
}

}  // namespace zest::checkpoint
