// UpdateInBackward: [engine] optimizer_in_backward. During the backward that ends a step, each bucket's
// units are updated by the optimizer as soon as the bucket's gradients are reduced, and the bucket's
// gradient memory is released right after — so a step holds a bucket or two of gradients instead of all of
// them, and on CUDA the updates run on their own stream beside the rest of the backward instead of after it.
// Without clipping or loss scaling (the config refuses both) the step's numbers are known before backward;
// only the non-finite check is per bucket (engine/step_scalars.h, begin/decide_bucket/finish_update_in_backward).
#pragma once

#include "engine/bucket.h"
#include "engine/grad_reducer.h"
#include "engine/step_scalars.h"
#include "optim/optimizer.h"
#include "optim/side_stream.h"

#include <torch/torch.h>

#include <optional>
#include <vector>

namespace zest {

class UpdateInBackward {
 public:
  // norm_pieces: each parameter's part of the rank's gradient slice, in unit order; pieces_of_unit[u]: the
  // index of unit u's first piece (pieces_of_unit[units] = pieces). param_sumsq: float64 [pieces], the
  // step's per-parameter sums of squares, filled bucket by bucket. scalars: the engine's StepScalars.
  UpdateInBackward(std::vector<Bucket>& buckets, GradReducer& reducer, Optimizer& optimizer, const StepRules& rules,
                   torch::Tensor scalars, std::vector<torch::Tensor> norm_pieces, std::vector<size_t> pieces_of_unit,
                   torch::Tensor param_sumsq);
  UpdateInBackward(const UpdateInBackward&) = delete;
  UpdateInBackward& operator=(const UpdateInBackward&) = delete;

  // Before the backward that ends the step: its learning rate, Adam's t and bias corrections.
  void begin_step();
  // Bucket b's reduction was just launched in that backward: orders it before b's update (on the update
  // stream), updates b's units, and releases the previous bucket's gradients once its update is done.
  void bucket_reduced(size_t bucket_idx);
  // After that backward: every update done before what the caller queues next, the last gradients
  // released. Then the caller sums param_sumsq over ranks (stages 2–3) and calls finish_step.
  void end_backward();
  // The step's norm, and the non-finite bookkeeping of a step in which some bucket was not updated.
  void finish_step();

 private:
  void release_awaiting();

  std::vector<Bucket>& buckets_;
  GradReducer& reducer_;
  Optimizer& optimizer_;
  const StepRules rules_;
  torch::Tensor scalars_;
  std::vector<torch::Tensor> norm_pieces_;
  std::vector<size_t> pieces_of_unit_;
  torch::Tensor param_sumsq_;
  SideStream stream_;  // CUDA: the updates' own stream; on the CPU they run in place
  std::optional<size_t> awaiting_release_;  // updated bucket whose gradients are released after a join
};

}  // namespace zest
