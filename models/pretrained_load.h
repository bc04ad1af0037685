// Loading pretrained weights into a freshly built model, streamed tensor by tensor (read one, convert,
// copy into the parameter, drop it), so a rank never holds a second copy of the model; and the trainer's
// entry point, which loads only when the run is not resuming from a checkpoint.
#pragma once

#include "comm/communicator.h"
#include "models/model_resolve.h"
#include "models/model_selection.h"
#include "models/pretrained_weights.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace zest {

struct PretrainedReport {
  int64_t loaded = 0;                   // tensors copied into the model
  std::vector<std::string> missing;     // model tensors not in the source (left as initialised)
  std::vector<std::string> unexpected;  // source tensors the model does not have
  std::vector<std::string> wrong_shape; // "name (file [..], model [..])"
  std::vector<std::string> dtypes;      // stored dtypes seen, e.g. {"F16"}
};

// Checks every name and shape first. Strict: any missing, unexpected or mis-shaped tensor is one error
// naming the source and listing every such tensor by name, and nothing is copied. Not strict: the
// matching tensors are loaded, the rest reported. Values are converted to each parameter's dtype.
PretrainedReport load_pretrained_weights(torch::nn::Module& model, const PretrainedWeights& weights, bool strict);

// The trainer's call, right after the model is built (every rank; collective). `resume_from` is the
// checkpoint the run will resume from ("" for a fresh start): a resume wins, and the base weights are
// not read at all. Otherwise loads `resolved.pretrained` (strict per `selection.strict`). Rank 0 prints
// what reading the config and the weights reported. Returns the record to save with every checkpoint
// (model_source_record; a resumed run takes it from its checkpoint) so exports can write the original
// folder format.
nlohmann::json start_from_pretrained(torch::nn::Module& model, const ResolvedModel& resolved,
                                     const ModelSelection& selection, const std::string& resume_from,
                                     Communicator& comm);

}  // namespace zest
