// The communicator that moves a device's tensors: NCCL over CUDA GPUs (created once per process, its
// unique id exchanged over the CPU world communicator, which then carries only control messages), the
// CPU communicator itself otherwise.
#pragma once

#include "comm/communicator.h"

#include <torch/torch.h>

#include <memory>

namespace zest {

// `control`: the world communicator (MPI, Gloo or self). For a CUDA device and more than one rank this
// returns the process's NcclCommunicator over the same ranks (built on first use); CPU tensors handed to
// it (checkpoint coordination, agreement) still go through `control`.
std::shared_ptr<Communicator> communicator_for_device(const std::shared_ptr<Communicator>& control,
                                                      const torch::Device& device);
// Destroys the cached device communicators (WorldGuard's destructor, before MPI is finalized).
void release_device_communicators();

}  // namespace zest
