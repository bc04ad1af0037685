// Per-rank model-state memory of each ZeRO stage (the ZeRO paper's accounting, docs/design.md 2): the formula
// behind `zest estimate` and the engine's own model_state_bytes() report.
#pragma once

#include "engine/engine_config.h"

#include <cstdint>

namespace zest {

struct ModelStateBytes {
  int64_t params = 0;     // compute-dtype parameters
  int64_t grads = 0;      // gradients, reduce dtype (full buffer at stages 0/1, own slice at 2/3)
  int64_t master = 0;     // fp32 master weights
  int64_t optimizer = 0;  // optimizer state (Adam: exp_avg + exp_avg_sq)
  int64_t ema = 0;        // fp32 EMA of the master weights ([ema]), sharded like the master
  int64_t frozen = 0;     // frozen parameters (a LoRA run's base), compute dtype, whole on every rank
  // [engine.offload] optimizer = "cpu": master, optimizer state and EMA live in host memory, with a small
  // page-locked ring (`staging`) the gradient and parameter pieces cross PCIe through.
  bool offloaded = false;
  int64_t staging = 0;
  int64_t total() const { return params + grads + master + optimizer + ema + frozen; }  // wherever it lives
  int64_t on_device() const { return offloaded ? params + grads + frozen : total(); }
  int64_t on_host() const { return offloaded ? master + optimizer + ema + staging : 0; }
};

struct MemoryModelInputs {
  int64_t numel = 0;  // trainable parameters P
  int world_size = 1;
  int stage = 2;
  Precision precision = Precision::bf16;     // compute dtype of the parameters
  Precision reduce_dtype = Precision::bf16;  // dtype gradients are accumulated and reduced in
  int64_t optimizer_bytes_per_element = 8;   // AdamW 8, SGD with momentum 4
  bool ema = false;                          // an fp32 EMA of the master: 4P at stage 0, 4P/N above
  bool offload_optimizer = false;            // stages 1–3: master, optimizer state and EMA in host memory
  int64_t offload_staging_bytes = 256LL << 20;  // [engine.offload] staging_mb, in bytes
  int64_t frozen_numel = 0;  // frozen parameters (LoRA's base): kept whole in the compute dtype, never sharded
  // [engine] optimizer_in_backward: gradients that live per step (stages 0–1, one rank) go bucket by bucket
  // during backward, so they are no model state (preflight counts the few buckets alive at once).
  bool optimizer_in_backward = false;
};

// bf16 + AdamW, reduce dtype bf16: stage 0 16P, stage 1 4P + 12P/N, stage 2 2P + 14P/N, stage 3 14P/N (no
// 16-bit parameters at rest; 16P/N with offload, whose device keeps the 16-bit slice the host updates).
// An fp32 reduce dtype keeps gradients in fp32: +2P at stages 0/1, +2P/N at stages 2/3. An EMA adds what
// the master takes (4P at stage 0, 4P/N at stages 1-3). Offloading moves master, optimizer state and EMA to
// the host (12P/N with AdamW), which also holds the staging ring: staging_mb, or less for a shard smaller
// than four of its slots (the engine cuts slots to its largest unit shard, so its ring may be smaller still).
// With optimizer_in_backward, per-step gradients (stages 0–1, any stage on one rank) count 0.
ModelStateBytes estimate_model_state_bytes(const MemoryModelInputs& in);

int64_t dtype_bytes(Precision p);

}  // namespace zest
