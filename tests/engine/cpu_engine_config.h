// The engine config the CPU engine tests start from: a stage and the compute and reduce dtypes.
#pragma once

#include "engine/engine_config.h"

namespace zest::testing {

inline EngineConfig cpu_config(int stage, Precision precision, Precision reduce = Precision::fp32) {
  EngineConfig ec;
  ec.device = DeviceKind::cpu;
  ec.stage = stage;
  ec.precision = precision;
  ec.reduce_dtype = reduce;
  return ec;
}

}  // namespace zest::testing
