// Communicator conveniences shared by every backend, built on the virtual collectives.
#include "comm/communicator.h"

namespace zest {

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

}  // namespace zest
