// FlopCounter: counts the matrix FLOPs a region of code runs, as PyTorch's FlopCounterMode does for the
// anchors — matrix products (mm, addmm, bmm, baddbmm), convolutions and their backward, and fused
// attention forward (4·B·H·Sq·Sk·D) and backward (twice that) — from the ATen operators' input shapes,
// through a RecordFunction callback. A checkpointed unit's recompute is not counted. It also counts the
// attention kernels by name, which tells which scaled_dot_product_attention backend ran.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace zest {

class FlopCounter {
 public:
  FlopCounter();   // starts counting (all threads: backward runs on autograd's device threads)
  ~FlopCounter();  // stops
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  int64_t flops() const;
  std::map<std::string, int64_t> attention_calls() const;  // operator name → calls

  struct State;  // shared with the RecordFunction callback

 private:
  std::shared_ptr<State> state_;
  uint64_t handle_ = 0;
};

}  // namespace zest
