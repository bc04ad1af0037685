// CpuAllocationCounter: while alive, every CPU tensor allocation goes through a wrapper of LibTorch's CPU
// allocator that counts the bytes live now and their peak, so a test can measure what a forward and
// backward really hold (the activation estimate is checked against it). Not thread-safe to nest.
#pragma once

#include "core/compat.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace zest::testing {

class CpuAllocationCounter : public c10::Allocator {
 public:
  CpuAllocationCounter() : inner_(c10::GetCPUAllocator()) {
    active().store(this);
    c10::SetCPUAllocator(this, /*priority=*/255);
  }
  // Memory allocated through the counter and still live is freed later through release() (the records
  // outlive the counter), uncounted.
  ~CpuAllocationCounter() override {
    c10::SetCPUAllocator(inner_, /*priority=*/255);
    active().store(nullptr);
  }
  CpuAllocationCounter(const CpuAllocationCounter&) = delete;
  CpuAllocationCounter& operator=(const CpuAllocationCounter&) = delete;

  int64_t live_bytes() const { return live_.load(); }
  int64_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

#if ZEST_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(size_t n) override { return counted(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return counted(n); }
#endif

 private:
  // The inner allocation of each live pointer. Kernels that allocate raw memory (oneDNN's) need a
  // DataPtr whose context is its data, freed by raw_deleter(): the records are found by address.
  struct Record {
    c10::DataPtr inner;
    int64_t bytes;
  };
  static std::mutex& records_mutex() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<void*, Record>& records() {
    static std::unordered_map<void*, Record> r;
    return r;
  }
  static std::atomic<CpuAllocationCounter*>& active() {
    static std::atomic<CpuAllocationCounter*> a{nullptr};
    return a;
  }

  static void release(void* data) {
    Record record;
    {
      std::lock_guard<std::mutex> lock(records_mutex());
      auto it = records().find(data);
      if (it == records().end()) return;
      record = std::move(it->second);
      records().erase(it);
    }
    if (CpuAllocationCounter* counter = active().load()) counter->live_.fetch_sub(record.bytes);
  }

 public:
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  c10::DataPtr counted(size_t n) const {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    if (data == nullptr) return inner;  // zero bytes: nothing to count
    {
      std::lock_guard<std::mutex> lock(records_mutex());
      records()[data] = Record{std::move(inner), static_cast<int64_t>(n)};
    }
    const int64_t now = live_.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return c10::DataPtr(data, data, &release, device);
  }

  c10::Allocator* inner_;
  mutable std::atomic<int64_t> live_{0};  // (mutable: 1.13's allocate() is const)
  mutable std::atomic<int64_t> peak_{0};
};

}  // namespace zest::testing
