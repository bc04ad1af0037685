// Where an engine runs: the CPU, or the GPU of this rank's LOCAL_RANK (OMPI_COMM_WORLD_LOCAL_RANK under
// mpirun, LOCAL_RANK under zest launch / torchrun), made the process's current CUDA device.
#pragma once

#include "comm/communicator.h"
#include "engine/engine_config.h"

#include <torch/torch.h>

namespace zest {

torch::Device place_engine(const EngineConfig& config, const Communicator& comm);

}  // namespace zest
