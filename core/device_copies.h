// DeviceCopies: a table computed once on the host (RoPE angles, timestep frequencies, a noise schedule)
// and its copies on the devices and dtypes asked for, each made on first use — so a training step never
// uploads the table again (an upload per step costs a copy from pageable memory, and a CUDA graph
// cannot capture one at all).
#pragma once

#include <torch/torch.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace zest {

class DeviceCopies {
 public:
  DeviceCopies() = default;
  explicit DeviceCopies(torch::Tensor host) : host_(std::move(host)) {}

  const torch::Tensor& host() const { return host_; }

  // The table on `device` in `dtype` (the host tensor itself when it already is that).
  torch::Tensor on(const torch::Device& device, torch::Dtype dtype) const {
    if (device == host_.device() && dtype == host_.scalar_type()) return host_;
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto key = std::make_tuple(static_cast<int>(device.type()), static_cast<int>(device.index()),
                                     static_cast<int>(dtype));
    auto found = copies_.find(key);
    if (found == copies_.end()) found = copies_.emplace(key, host_.to(device, dtype)).first;
    return found->second;
  }
  torch::Tensor on(const torch::Device& device) const { return on(device, host_.scalar_type()); }

 private:
  torch::Tensor host_;
  mutable std::mutex mutex_;
  mutable std::map<std::tuple<int, int, int>, torch::Tensor> copies_;
};

}  // namespace zest
