// The one set of rules a parsed manifest must satisfy beyond field types: known stage, precision and
// tensor kinds (and the EMA's settings), the model identity hash, and a layout that can be trusted byte
// for byte (unique names, numel = product of the shape, parameters stored in order and back to back
// inside their unit, padding that splits evenly over the ranks). parse_manifest() applies it, so load, merge and
// `zest ckpt inspect --verify` can never disagree about a manifest; save applies it before writing one.
#pragma once

#include "checkpoint/manifest.h"

#include <string>
#include <vector>

namespace zest::checkpoint {

// Every rule broken by `manifest` (empty when it is sound), one sentence each.
std::vector<std::string> manifest_problems(const Manifest& manifest);

// Throws zest::Error naming `source` and listing the problems (the first few) when there are any.
void validate_manifest(const Manifest& manifest, const std::string& source);

// A folder named step_N must hold the manifest of step N (a manifest copied from another checkpoint
// would otherwise pass for this one). Folders with other names are not checked.
void check_step_folder(const Manifest& manifest, const std::string& step_dir, const std::string& source);

// The tensor kinds a checkpoint of this optimizer holds: "master", then its state names, then "ema"
// when the run keeps an EMA of the weights.
std::vector<std::string> expected_kinds(OptimizerKind optimizer, bool ema);

}  // namespace zest::checkpoint
