// EngineConfig: the [engine] table (stage, precision, accumulation, clipping, buckets, activation
// checkpointing), [engine.offload], [engine.loss_scale] and [engine.kernels], one field table (engine_fields()).
#pragma once

#include "core/kernel_switches.h"

#include <torch/torch.h>

#include <optional>
#include <string>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h
template <typename C>
class FieldTable;  // core/field_table.h

enum class Precision { fp32, bf16, fp16 };
torch::Dtype to_dtype(Precision p);
const char* to_string(Precision p);
// The precision spelled `name` ("fp32", "bf16", "fp16"; to_string's words), nullopt for any other.
std::optional<Precision> precision_named(const std::string& name);

// What the fp16 loss scaler does when an overflow happens at the minimum scale.
enum class AtMinScale { warn, error };
const char* to_string(AtMinScale a);

enum class CheckpointPolicy { none, all, every_k };
const char* to_string(CheckpointPolicy p);

// Where the model, flat buffers, master shard and optimizer state live. auto: CUDA when present.
enum class DeviceKind { auto_, cuda, cpu };
const char* to_string(DeviceKind d);

// Where the fp32 master shard and optimizer state live ([engine.offload] optimizer): on the engine's
// device, or in host memory, updated there by the host optimizer (ZeRO-Offload).
enum class OffloadTarget { none, cpu };
const char* to_string(OffloadTarget t);

// Whole steps as CUDA graphs (engine/step_graphs.h): auto = on for CUDA where the engine can be captured.
enum class CudaGraphs { auto_, off };
const char* to_string(CudaGraphs g);

// The precision of the Linear layers' training products (kernels/matmul_precision.h): the compute dtype
// ("bf16"), or fp8 operands scaled per tensor on fp8 tensor cores.
enum class MatmulPrecision { bf16, fp8 };
const char* to_string(MatmulPrecision m);

struct LossScaleConfig {
  double initial = 65536.0;   // 2^16
  int window = 1000;          // clean steps before the scale doubles
  int hysteresis = 1;         // overflows tolerated before the scale halves (1 = halve on every one)
  double min = 1.0;           // floor
  AtMinScale at_min = AtMinScale::error;
};

struct EngineConfig {
  int stage = 2;                                // 0 (DP), 1, 2, 3 (parameters sharded at rest)
  DeviceKind device = DeviceKind::auto_;        // rank r drives GPU LOCAL_RANK when CUDA
  double collective_timeout_s = 600.0;          // a collective not done by then ends every rank, named
  double rendezvous_timeout_s = 300.0;          // every rank must have joined by then (comm/rendezvous.h)
  bool reshard_after_forward = true;            // stage 3: free a unit's gathered parameters after its forward
  int prefetch = 1;                             // stage 3: buckets gathered ahead of the running one
  Precision precision = Precision::bf16;        // compute dtype of parameters and activations
  Precision reduce_dtype = Precision::fp32;     // dtype gradients are reduced in
  MatmulPrecision matmul = MatmulPrecision::bf16;  // the Linear layers' training products: bf16 or fp8
  int accumulation_steps = 1;                   // micro-batches per optimizer step
  double clip_norm = 0.0;                       // global grad-norm clip; 0 = off
  bool optimizer_in_backward = false;           // update each bucket as soon as its gradients are reduced
  double bucket_mb = 25.0;                      // small neighbouring units are fused up to this size
  CheckpointPolicy activation_checkpointing = CheckpointPolicy::none;
  int checkpoint_every = 2;                     // k for every_k
  int max_nonfinite_steps = 5;                  // consecutive skipped (non-finite) steps before the run stops
  int threads = 0;                              // intra-op threads per rank; 0 = cores / local ranks
  OffloadTarget offload_optimizer = OffloadTarget::none;  // [engine.offload] optimizer (stages 1–3)
  double offload_staging_mb = 256.0;  // [engine.offload] staging_mb: the page-locked ring the shard streams through
  CudaGraphs cuda_graphs = CudaGraphs::auto_;  // capture whole steps as CUDA graphs and replay them
  bool cudnn_benchmark = true;  // CUDA: time cuDNN's convolution algorithms once per shape, keep the fastest
  LossScaleConfig loss_scale;
  KernelsConfig kernels;  // [engine.kernels]: the kernel switches (core/kernel_switches.h)

  // Reads [engine], [engine.offload] and [engine.loss_scale] strictly: wrong types, out-of-range values, unknown keys and
  // inconsistent combinations (e.g. loss_scale without fp16) are errors at the key's file:line:col.
  static EngineConfig from_toml(ConfigTable& table);

  // The device kind after resolving auto (CUDA when this build has it and a GPU is visible).
  DeviceKind resolved_device() const;
  // [engine.offload] staging_mb in bytes.
  int64_t offload_staging_bytes() const { return static_cast<int64_t>(offload_staging_mb * 1024 * 1024); }
};

// True when this build has CUDA and at least one GPU is visible.
bool is_cuda_available();

// Whether this machine can run `config`: CUDA asked for without a GPU, fp16 on the CPU (LibTorch's CPU
// kernels lack fp16 matrix products) and fp8 products without CUDA are errors at the [engine] key. Run files call this after
// parsing (`zest train`, `zest config check`); parsing alone stays machine-independent.
void check_supported_here(ConfigTable& engine_table, const EngineConfig& config);

// Writes every field (defaults included) with its one-line doc; [engine.loss_scale] only for fp16.
void to_toml(const EngineConfig& config, ConfigWriter& out);

// The [engine] table: its keys, [engine.offload], [engine.loss_scale] and [engine.kernels] (core/field_table.h).
const FieldTable<EngineConfig>& engine_fields();

}  // namespace zest
